#pragma once
/// (being written)

#include "tensor.hpp"

namespace mixprec::autodiff {} // namespace mixprec::autodiff
