#pragma once
/// Exceptions thrown by mixprec::autodiff. Every message names what was expected and what was given.

#include <stdexcept>

namespace mixprec::autodiff {

/// Two shapes that had to agree did not; the message prints both.
class shape_error : public std::invalid_argument {
  public:
    using std::invalid_argument::invalid_argument;
};

/// A tensor of one dtype was given where another was required; mixprec never converts silently.
class dtype_error : public std::invalid_argument {
  public:
    using std::invalid_argument::invalid_argument;
};

} // namespace mixprec::autodiff
