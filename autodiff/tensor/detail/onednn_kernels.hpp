#pragma once
// Internal: the one oneDNN engine and the per-thread stream that every oneDNN primitive in mixprec runs
// on (matmul_onednn.cpp defines them). Included only by the files that call oneDNN.

#include <oneapi/dnnl/dnnl.hpp>

namespace mixprec::autodiff::detail {

dnnl::engine& onednn_engine();
dnnl::stream& onednn_stream(); ///< this thread's

} // namespace mixprec::autodiff::detail
