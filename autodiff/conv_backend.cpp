#include <mixprec/autodiff/ops_conv.hpp>
#include <mixprec/autodiff/tensor/detail/named_choice.hpp>

#include <atomic>
#include <string>

namespace mixprec::autodiff {
namespace {

constexpr detail::name_table<ConvBackend, 5> names{{{ConvBackend::automatic, "automatic"},
                                                    {ConvBackend::im2col, "im2col"},
                                                    {ConvBackend::im2col_onednn, "im2col_onednn"},
                                                    {ConvBackend::onednn, "onednn"},
                                                    {ConvBackend::measured, "measured"}}};

/// The process's route for ConvBackend::automatic, read from MIXPREC_CONV_ROUTE at first use.
std::atomic<ConvBackend>& process_backend() {
    return detail::process_choice("MIXPREC_CONV_ROUTE", ConvBackend::automatic, conv_backend_named);
}

} // namespace

std::string_view name_of(ConvBackend backend) { return detail::name_in(names, backend); }

ConvBackend conv_backend_named(std::string_view name) { return detail::named_in(names, name, "convolution route"); }

ConvBackend conv_backend() { return process_backend().load(std::memory_order_relaxed); }

void set_conv_backend(ConvBackend backend) { process_backend().store(backend, std::memory_order_relaxed); }

} // namespace mixprec::autodiff
