#pragma once
/// Tensor: a shape, a runtime dtype and contiguous row-major storage of that dtype's true width.
///
/// A float16 tensor of N elements holds 2N bytes. Copying a Tensor shares its storage (as
/// torch::Tensor does); `clone()` makes an independent copy. A tensor never changes dtype silently:
/// `to(dtype)` is the only conversion, and it rounds once, to nearest even.
/// xtensor interop (from_xarray, to_xarray, as_xt) lives in tensor_xt.hpp.

#include <mixprec/autodiff/tensor/dtype.hpp>
#include <mixprec/autodiff/tensor/errors.hpp>
#include <mixprec/autodiff/tensor/format.hpp>
#include <mixprec/autodiff/tensor/shape.hpp>

#include <cstddef>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mixprec::autodiff {

class Tensor {
  public:
    /// A float32 scalar holding 0.
    Tensor() : Tensor(Shape{}) {}
    /// Zeros of the given shape and dtype.
    explicit Tensor(const Shape& shape, Dtype dtype = Dtype::float32);

    /// Storage of the given shape and dtype with unspecified contents, for code that writes every element
    /// before anything reads it (kernels); everything else should use the zero-filling constructor.
    static Tensor uninitialized(const Shape& shape, Dtype dtype = Dtype::float32);
    /// `values` (row-major, shape.elements() of them) rounded once to `dtype`.
    static Tensor from_floats(const Shape& shape, std::span<const float> values, Dtype dtype = Dtype::float32);
    /// Every element = round(value).
    static Tensor full(const Shape& shape, float value, Dtype dtype = Dtype::float32);

    const Shape& shape() const { return shape_; }
    Dtype dtype() const { return dtype_; }
    std::size_t rank() const { return shape_.rank(); }
    std::size_t size() const { return shape_.elements(); }
    std::size_t nbytes() const { return size() * size_of(dtype_); }

    /// A copy in `dtype`, each element rounded once; shares storage when the dtype is already `dtype`.
    Tensor to(Dtype dtype) const;
    /// An independent copy.
    Tensor clone() const;
    /// The same storage seen with another shape of the same element count.
    Tensor reshape(const Shape& shape) const;
    /// All elements widened to float32, row-major.
    std::vector<float> to_floats() const;

    /// Element at a multi-index, widened to float (for tests and inspection; checked).
    float at(std::initializer_list<std::size_t> index) const;
    /// Element at a row-major flat index, widened to float (checked).
    float flat(std::size_t i) const;
    /// Stores round(value) at a multi-index (checked). Visible through every tensor sharing the storage.
    void set(std::initializer_list<std::size_t> index, float value);

    /// Typed storage; T must be the C++ type of dtype() (float, float16, ...), else dtype_error.
    template <class T>
    std::span<T> data() {
        check_element_type(dtype_of<T>);
        return {static_cast<T*>(raw()), size()};
    }
    template <class T>
    std::span<const T> data() const {
        check_element_type(dtype_of<T>);
        return {static_cast<const T*>(raw()), size()};
    }
    void* raw() { return storage_.get(); }
    const void* raw() const { return storage_.get(); }

    bool shares_storage_with(const Tensor& other) const { return storage_ == other.storage_; }

    /// Identity of this tensor value for GradientTape: copies keep it; every new tensor (an op's result,
    /// reshape, to, clone) gets a fresh one.
    std::uint64_t id() const { return id_; }

    /// "float16 (2, 3)": for messages. to_string(tensor), below, prints the values too.
    std::string description() const;

  private:
    struct no_fill {};
    Tensor(const Shape& shape, Dtype dtype, no_fill);
    std::size_t offset_of(std::initializer_list<std::size_t> index) const;
    void check_element_type(Dtype requested) const;

    Shape shape_;
    Dtype dtype_ = Dtype::float32;
    std::shared_ptr<std::byte[]> storage_; // 64-byte aligned, nbytes() long
    std::uint64_t id_;
};

/// How to_string prints values: NumPy's print options, with its defaults.
struct PrintOptions {
    int precision = 8;            ///< most digits after the point (of the mantissa when scientific), 0 to 17
    std::size_t threshold = 1000; ///< a tensor of more elements is summarized
    std::size_t edgeitems = 3;    ///< elements printed at each end of a summarized axis
    std::size_t linewidth = 75;   ///< a row wraps before it gets longer than this
};

/// The description on one line ("float16 (2, 3)"), then the values as NumPy's str(array) prints them:
///
///   float32 (2, 3)
///   [[ 1.     2.5   -3.   ]
///    [ 0.125  4.     5.   ]]
///
/// Nested brackets, one row per line (a blank line between blocks of higher axes, rows wrapped at
/// `linewidth`), the values widened to float32 and aligned on the point. Each value is written with the
/// fewest digits (at most `precision` after the point) that read back as the same value of the tensor's
/// dtype: a float16 0.1 prints as 0.1, not as float32's 0.099975586. Scientific notation when a nonzero
/// magnitude is ≥ 1e8 or < 1e-4, or the largest is more than 1000 times the smallest ("1.5e-05");
/// "nan", "inf", "-inf". Past `threshold` elements, every axis longer than 2·edgeitems shows its first
/// and last `edgeitems` entries around "...". A scalar prints its value alone, an empty tensor "[]".
/// std::invalid_argument for a precision outside [0, 17].
std::string to_string(const Tensor& x, const PrintOptions& options = {});
/// Writes to_string(x) with the default options.
std::ostream& operator<<(std::ostream& os, const Tensor& x);

/// Throws shape_error "<what>: shapes (a) and (b) differ" unless equal.
void check_same_shape(const Tensor& a, const Tensor& b, const char* what);
/// Throws dtype_error "<what>: dtypes float16 and float32 differ" unless equal.
void check_same_dtype(const Tensor& a, const Tensor& b, const char* what);

} // namespace mixprec::autodiff
