#include <mixprec/amp/gradient_exchange.hpp>

#include <mixprec/autodiff/tensor/convert.hpp>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace mixprec::amp {

GradientTransport parse_gradient_transport(std::string_view name) {
    if (name == "float32") return GradientTransport::float32;
    if (name == "compute") return GradientTransport::compute;
    throw std::invalid_argument("unknown gradient transport '" + std::string(name) + "' (valid: float32, compute)");
}

GradientExchange::GradientExchange(std::shared_ptr<optim::Communicator> communicator, DataParallelOptions options)
    : communicator_(std::move(communicator)), options_(options) {
    if (!communicator_) throw std::invalid_argument("GradientExchange: the communicator is null");
    if (options_.bucket_bytes < 1024)
        throw std::invalid_argument("GradientExchange: a bucket of " + std::to_string(options_.bucket_bytes) +
                                    " bytes is too small (at least 1024)");
}

void GradientExchange::lay_out(std::size_t n, const auto& dtype_of, const auto& size_of) {
    segments_.clear();
    std::size_t floats = 0;
    std::array<std::size_t, autodiff::dtype_count> halves{};
    for (std::size_t i = 0; i < n; ++i) {
        const autodiff::Dtype d = dtype_of(i);
        const bool narrow = options_.transport == GradientTransport::compute && optim::is_16_bit_float(d);
        const autodiff::Dtype travels = narrow ? d : autodiff::Dtype::float32;
        std::size_t& used = narrow ? halves[std::size_t(d)] : floats;
        segments_.push_back({travels, used, size_of(i)});
        used += size_of(i);
    }
    floats_.resize(floats);
    for (std::size_t d = 0; d < halves.size(); ++d) halves_[d].resize(halves[d]);
}

const void* GradientExchange::data_of(const Segment& s) const {
    return s.dtype == autodiff::Dtype::float32 ? static_cast<const void*>(floats_.data() + s.offset)
                                               : halves_[std::size_t(s.dtype)].data() + s.offset;
}

void* GradientExchange::data_of(const Segment& s) { return const_cast<void*>(std::as_const(*this).data_of(s)); }

void GradientExchange::exchange() {
    const std::size_t float_bucket = options_.bucket_bytes / sizeof(float);
    for (std::size_t i = 0; i < floats_.size(); i += float_bucket)
        communicator_->sum(std::span(floats_).subspan(i, std::min(float_bucket, floats_.size() - i)));
    last_bytes_ = floats_.size() * sizeof(float);
    const std::size_t half_bucket = options_.bucket_bytes / sizeof(std::uint16_t);
    for (std::size_t d = 0; d < halves_.size(); ++d) {
        std::vector<std::uint16_t>& h = halves_[d];
        for (std::size_t i = 0; i < h.size(); i += half_bucket)
            communicator_->sum(std::span(h).subspan(i, std::min(half_bucket, h.size() - i)), autodiff::Dtype(d));
        last_bytes_ += h.size() * sizeof(std::uint16_t);
    }
}

UnscaleResult GradientExchange::unscale_all(std::span<const float> inverse_scales,
                                            std::vector<std::vector<float>>& out) {
    const float ranks = float(communicator_->size());
    out.resize(segments_.size());
    UnscaleResult total;
    for (std::size_t i = 0; i < segments_.size(); ++i) {
        out[i].resize(segments_[i].size);
        const UnscaleResult r = unscale(data_of(segments_[i]), segments_[i].dtype, inverse_scales[i] / ranks, out[i]);
        total.finite = total.finite && r.finite;
        total.squared_norm += r.squared_norm;
    }
    return total;
}

namespace {

void check_counts(std::size_t grads, std::size_t scales) {
    if (grads != scales)
        throw std::invalid_argument("GradientExchange: " + std::to_string(grads) + " gradients and " +
                                    std::to_string(scales) + " scales");
}

} // namespace

UnscaleResult GradientExchange::reduce(const std::vector<autodiff::Tensor>& grads,
                                       std::span<const float> inverse_scales, std::vector<std::vector<float>>& out) {
    check_counts(grads.size(), inverse_scales.size());
    lay_out(
        grads.size(), [&](std::size_t i) { return grads[i].dtype(); }, [&](std::size_t i) { return grads[i].size(); });
    for (std::size_t i = 0; i < grads.size(); ++i) {
        const Segment& s = segments_[i];
        if (s.dtype == grads[i].dtype())
            std::memcpy(data_of(s), grads[i].raw(), grads[i].nbytes());
        else
            autodiff::widen(grads[i].raw(), grads[i].dtype(), floats_.data() + s.offset, s.size);
    }
    exchange();
    return unscale_all(inverse_scales, out);
}

UnscaleResult GradientExchange::reduce(std::vector<std::vector<float>>& grads, std::span<const float> inverse_scales) {
    check_counts(grads.size(), inverse_scales.size());
    lay_out(
        grads.size(), [](std::size_t) { return autodiff::Dtype::float32; },
        [&](std::size_t i) { return grads[i].size(); });
    for (std::size_t i = 0; i < grads.size(); ++i)
        std::copy(grads[i].begin(), grads[i].end(), floats_.begin() + std::ptrdiff_t(segments_[i].offset));
    exchange();
    return unscale_all(inverse_scales, grads);
}

} // namespace mixprec::amp
