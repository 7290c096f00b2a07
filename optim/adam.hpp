#pragma once
/// (being written)

namespace mixprec::optim {} // namespace mixprec::optim
