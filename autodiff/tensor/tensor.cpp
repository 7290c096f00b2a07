#include <mixprec/autodiff/tensor/tensor.hpp>

#include <mixprec/autodiff/tensor/convert.hpp>
#include <mixprec/autodiff/tensor/detail/parallel.hpp>
#include <mixprec/autodiff/tensor/rounding.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>

namespace mixprec::autodiff {
namespace {

constexpr std::align_val_t alignment{64};

std::shared_ptr<std::byte[]> allocate(std::size_t bytes, bool zero) {
    auto* p = static_cast<std::byte*>(::operator new(bytes, alignment));
    if (zero) std::memset(p, 0, bytes);
    if (RoundingRecorder* recorder = active_rounding_recorder()) recorder->forget(p, bytes);
    return {p, [](std::byte* q) { ::operator delete(q, alignment); }};
}

std::uint64_t next_id() {
    static std::atomic<std::uint64_t> counter{1};
    return counter.fetch_add(1, std::memory_order_relaxed);
}

} // namespace

Tensor::Tensor(const Shape& shape, Dtype dtype)
    : shape_(shape), dtype_(dtype), storage_(allocate(shape.elements() * size_of(dtype), true)), id_(next_id()) {}

Tensor::Tensor(const Shape& shape, Dtype dtype, no_fill)
    : shape_(shape), dtype_(dtype), storage_(allocate(shape.elements() * size_of(dtype), false)), id_(next_id()) {}

Tensor Tensor::uninitialized(const Shape& shape, Dtype dtype) { return Tensor(shape, dtype, no_fill{}); }

Tensor Tensor::from_floats(const Shape& shape, std::span<const float> values, Dtype dtype) {
    if (values.size() != shape.elements())
        throw shape_error("Tensor::from_floats: " + std::to_string(values.size()) + " values for shape " +
                          shape.to_string() + ", which holds " + std::to_string(shape.elements()));
    Tensor t = uninitialized(shape, dtype);
    narrow(values.data(), t.raw(), values.size(), dtype);
    return t;
}

namespace {
/// Fills n elements of W-byte storage with `value` rounded once to dtype.
template <class W>
void fill_rounded(void* data, std::size_t n, float value, Dtype dtype) {
    W bits;
    narrow(&value, &bits, 1, dtype);
    std::fill_n(static_cast<W*>(data), n, bits);
}
} // namespace

Tensor Tensor::full(const Shape& shape, float value, Dtype dtype) {
    Tensor t = uninitialized(shape, dtype);
    switch (size_of(dtype)) {
    case 4:
        fill_rounded<std::uint32_t>(t.raw(), t.size(), value, dtype);
        break;
    case 2:
        fill_rounded<std::uint16_t>(t.raw(), t.size(), value, dtype);
        break;
    default:
        fill_rounded<std::uint8_t>(t.raw(), t.size(), value, dtype);
        break;
    }
    return t;
}

Tensor Tensor::to(Dtype dtype) const {
    if (dtype == dtype_) return *this;
    Tensor out = uninitialized(shape_, dtype);
    if (dtype_ != Dtype::float32 && dtype != Dtype::float32) {
        const std::vector<float> wide = to_floats();
        narrow(wide.data(), out.raw(), size(), dtype);
        return out;
    }
    // float32 to or from another format on every thread (elementwise: the same bits however split), as a
    // mixed-precision layer reads its variable's working copy each step
    constexpr std::size_t piece = std::size_t{1} << 14;
    if (dtype_ == Dtype::float32) {
        const auto* from = static_cast<const float*>(raw());
        auto* to = static_cast<std::byte*>(out.raw());
        RoundingBatch rounding(out);
        detail::split(size(), piece, [&](std::size_t begin, std::size_t end) {
            narrow(from + begin, to + begin * size_of(dtype), end - begin, dtype, rounding);
        });
    } else {
        const auto* from = static_cast<const std::byte*>(raw());
        auto* to = static_cast<float*>(out.raw());
        detail::split(size(), piece, [&](std::size_t begin, std::size_t end) {
            widen(from + begin * size_of(dtype_), dtype_, to + begin, end - begin);
        });
    }
    return out;
}

Tensor Tensor::clone() const {
    Tensor out = uninitialized(shape_, dtype_);
    std::memcpy(out.raw(), raw(), nbytes());
    return out;
}

Tensor Tensor::reshape(const Shape& shape) const {
    if (shape.elements() != shape_.elements())
        throw shape_error("reshape: cannot view shape " + shape_.to_string() + " (" + std::to_string(size()) +
                          " elements) as " + shape.to_string() + " (" + std::to_string(shape.elements()) + ")");
    Tensor out = *this;
    out.shape_ = shape;
    out.id_ = next_id();
    return out;
}

std::vector<float> Tensor::to_floats() const {
    std::vector<float> out(size());
    widen(raw(), dtype_, out.data(), size());
    return out;
}

std::size_t Tensor::offset_of(std::initializer_list<std::size_t> index) const {
    if (index.size() != rank())
        throw shape_error("index of rank " + std::to_string(index.size()) + " for a tensor of shape " +
                          shape_.to_string());
    std::size_t offset = 0, axis = 0;
    for (std::size_t i : index) {
        if (i >= shape_[axis])
            throw std::out_of_range("index " + std::to_string(i) + " is out of range for axis " + std::to_string(axis) +
                                    " of shape " + shape_.to_string());
        offset = offset * shape_[axis++] + i;
    }
    return offset;
}

float Tensor::at(std::initializer_list<std::size_t> index) const { return flat(offset_of(index)); }

float Tensor::flat(std::size_t i) const {
    if (i >= size())
        throw std::out_of_range("flat index " + std::to_string(i) + " is out of range for shape " + shape_.to_string());
    float value;
    widen(static_cast<const std::byte*>(raw()) + i * size_of(dtype_), dtype_, &value, 1);
    return value;
}

void Tensor::set(std::initializer_list<std::size_t> index, float value) {
    narrow(&value, static_cast<std::byte*>(raw()) + offset_of(index) * size_of(dtype_), 1, dtype_);
}

std::string Tensor::description() const { return std::string(name_of(dtype_)) + " " + shape_.to_string(); }

void Tensor::check_element_type(Dtype requested) const {
    if (requested != dtype_)
        throw dtype_error("Tensor::data<" + std::string(name_of(requested)) + ">() on a " + description() + " tensor");
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* what) {
    if (a.shape() != b.shape())
        throw shape_error(std::string(what) + ": shapes " + a.shape().to_string() + " and " + b.shape().to_string() +
                          " differ");
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* what) {
    if (a.dtype() != b.dtype())
        throw dtype_error(std::string(what) + ": dtypes " + std::string(name_of(a.dtype())) + " and " +
                          std::string(name_of(b.dtype())) + " differ (convert one with .to())");
}

} // namespace mixprec::autodiff
