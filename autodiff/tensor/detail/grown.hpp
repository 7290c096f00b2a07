#pragma once
// Internal: per-thread and reused buffers that grow and never shrink.

#include <cstddef>
#include <vector>

namespace mixprec::autodiff::detail {

/// v's storage for at least n elements. It grows and never shrinks: resize() down and up again would
/// value-initialize (zero) the regrown part on every call, a pass over memory that the caller then
/// overwrites, whenever calls of several sizes share a buffer.
template <class T>
T* grown(std::vector<T>& v, std::size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
}

} // namespace mixprec::autodiff::detail
