// to_string and operator<< of Tensor (tensor.hpp): NumPy's array printing.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <mixprec/autodiff/tensor/convert.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace mixprec::autodiff {
namespace {

/// v rounded to `dtype` and widened back: v itself when v is a value of that dtype.
float in_dtype(float v, Dtype dtype) {
    if (dtype == Dtype::float32) return v;
    std::array<std::byte, 4> bits{};
    narrow(&v, bits.data(), 1, dtype);
    float back = 0;
    widen(bits.data(), dtype, &back, 1);
    return back;
}

/// The shortest text of v with at most `precision` digits after the point (of the mantissa, when
/// scientific) that reads back as v once rounded to `dtype`; else v rounded to `precision` digits, without
/// the trailing zeros that leaves.
std::string shortest(float v, Dtype dtype, int precision, bool scientific) {
    const std::chars_format format = scientific ? std::chars_format::scientific : std::chars_format::fixed;
    std::array<char, 128> buf{}; // the longest: 39 digits of float32's largest value, then the fraction
    for (int p = 0; p <= precision; ++p) {
        const std::to_chars_result r = std::to_chars(buf.data(), buf.data() + buf.size(), v, format, p);
        float back = 0;
        std::from_chars(buf.data(), r.ptr, back, format);
        if (in_dtype(back, dtype) == v || p == precision) {
            std::string text(buf.data(), r.ptr);
            const std::size_t e = std::min(text.find('e'), text.size());
            const std::size_t dot = text.find('.');
            std::size_t end = e;
            while (dot != std::string::npos && end > dot + 1 && text[end - 1] == '0') --end;
            return text.erase(end, e - end);
        }
    }
    return {};
}

/// A finite value's text split around its point and exponent: "-1.25e-05" is "-1", "25", "-05".
struct Parts {
    std::string whole, fraction, exponent;
};

Parts split(const std::string& text) {
    Parts p;
    const std::size_t e = text.find('e');
    const std::string mantissa = text.substr(0, e);
    if (e != std::string::npos) p.exponent = text.substr(e + 1);
    const std::size_t dot = mantissa.find('.');
    p.whole = mantissa.substr(0, dot);
    if (dot != std::string::npos) p.fraction = mantissa.substr(dot + 1);
    return p;
}

/// Where "..." stands for the indices a summarized axis leaves out.
constexpr std::size_t gap = static_cast<std::size_t>(-1);

class Printer {
  public:
    Printer(const Tensor& x, const PrintOptions& o) : x_(x), o_(o), summarize_(x.size() > o.threshold) {
        for (std::size_t a = x.rank(), step = 1; a-- > 0;) {
            stride_[a] = step;
            step *= x.shape()[a];
        }
        collect(0, 0);
        choose_format();
    }

    std::string text() const {
        if (x_.rank() == 0) return words_.front();
        std::size_t next = 0;
        return block(0, next);
    }

  private:
    /// The indices of `axis` that are printed, with `gap` for the ones left out.
    std::vector<std::size_t> printed(std::size_t axis) const {
        const std::size_t dim = x_.shape()[axis], edge = o_.edgeitems;
        std::vector<std::size_t> out;
        if (summarize_ && dim > 2 * edge) {
            for (std::size_t i = 0; i < edge; ++i) out.push_back(i);
            out.push_back(gap);
            for (std::size_t i = dim - edge; i < dim; ++i) out.push_back(i);
        } else {
            for (std::size_t i = 0; i < dim; ++i) out.push_back(i);
        }
        return out;
    }

    /// The printed values, in the order they are printed.
    void collect(std::size_t axis, std::size_t offset) {
        if (axis == x_.rank()) {
            values_.push_back(x_.flat(offset));
            return;
        }
        for (std::size_t i : printed(axis))
            if (i != gap) collect(axis + 1, offset + i * stride_[axis]);
    }

    /// NumPy's rule: scientific when a nonzero magnitude is ≥ 1e8 or < 1e-4, or the largest is over 1000
    /// times the smallest; then every value's shortest text, aligned on the point.
    void choose_format() {
        float smallest = INFINITY, largest = 0;
        for (float v : values_) {
            if (!std::isfinite(v) || v == 0) continue;
            smallest = std::min(smallest, std::fabs(v));
            largest = std::max(largest, std::fabs(v));
        }
        const bool scientific =
            largest > 0 && (largest >= 1e8f || smallest < 1e-4f || double(largest) / double(smallest) > 1e3);
        std::vector<Parts> parts;
        std::size_t left = 0, right = 0, width = 0;
        for (float v : values_) {
            if (!std::isfinite(v)) continue;
            parts.push_back(split(shortest(v, x_.dtype(), o_.precision, scientific)));
            left = std::max(left, parts.back().whole.size());
            right = std::max(right, parts.back().fraction.size());
        }
        std::size_t k = 0;
        for (float v : values_) {
            std::string word;
            if (std::isnan(v)) {
                word = "nan";
            } else if (std::isinf(v)) {
                word = v < 0 ? "-inf" : "inf";
            } else {
                const Parts& p = parts[k++];
                word.assign(left - p.whole.size(), ' ');
                word += p.whole;
                word += '.';
                word += p.fraction;
                word.append(right - p.fraction.size(), scientific ? '0' : ' ');
                if (scientific) {
                    word += 'e';
                    word += p.exponent;
                }
            }
            width = std::max(width, word.size());
            words_.push_back(std::move(word));
        }
        for (std::string& w : words_) w.insert(0, width - w.size(), ' '); // right-aligned, as NumPy
    }

    /// The text of the next sub-array at `axis`; `next` counts the words used so far.
    std::string block(std::size_t axis, std::size_t& next) const {
        const std::size_t rank = x_.rank();
        std::string s = "[";
        if (axis + 1 == rank) { // a row: words separated by spaces, wrapped under its first word
            std::size_t column = rank;
            bool first = true;
            for (std::size_t i : printed(axis)) {
                const std::string& word = i == gap ? ellipsis : words_[next++];
                if (!first) {
                    if (column + 1 + word.size() + 1 > o_.linewidth) { // room for a ']'
                        s += '\n';
                        s.append(rank, ' ');
                        column = rank;
                    } else {
                        s += " ";
                        ++column;
                    }
                }
                s += word;
                column += word.size();
                first = false;
            }
            s += ']';
            return s;
        }
        std::string separator(rank - axis - 1, '\n');
        separator.append(axis + 1, ' ');
        bool first = true;
        for (std::size_t i : printed(axis)) {
            if (!first) s += separator;
            s += i == gap ? ellipsis : block(axis + 1, next);
            first = false;
        }
        s += ']';
        return s;
    }

    inline static const std::string ellipsis = "...";
    const Tensor& x_;
    const PrintOptions& o_;
    bool summarize_;
    std::array<std::size_t, Shape::max_rank> stride_{};
    std::vector<float> values_;
    std::vector<std::string> words_;
};

} // namespace

std::string to_string(const Tensor& x, const PrintOptions& options) {
    if (options.precision < 0 || options.precision > 17)
        throw std::invalid_argument("to_string: PrintOptions::precision must be in [0, 17], got " +
                                    std::to_string(options.precision));
    std::string s = x.description() + "\n";
    if (x.size() == 0) return s + "[]";
    return s + Printer(x, options).text();
}

std::ostream& operator<<(std::ostream& os, const Tensor& x) { return os << to_string(x); }

} // namespace mixprec::autodiff
