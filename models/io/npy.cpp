// .npy files: the header's grammar, and the conversions to and from tensors.

#include <mixprec/models/io/npy.hpp>

#include <mixprec/models/io/detail/bytes.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <optional>

namespace mixprec::models {

static_assert(std::endian::native == std::endian::little,
              "npy.cpp copies little-endian array bytes to and from tensor storage as they are");

namespace {

using namespace detail;

[[noreturn]] void fail(const std::string& message) { throw npy_error(message); }

constexpr std::uint16_t max16 = 0xffff; // the largest header length of version 1.0

// ---- element types ----

struct TypeInfo {
    std::string_view name, descr;
    std::size_t itemsize;
};
constexpr std::array<TypeInfo, 6> types = {{{"float32", "<f4", 4},
                                            {"float64", "<f8", 8},
                                            {"float16", "<f2", 2},
                                            {"uint8", "|u1", 1},
                                            {"int32", "<i4", 4},
                                            {"int64", "<i8", 8}}};

const TypeInfo& info(NpyType type) { return types.at(static_cast<std::size_t>(type)); }

NpyType type_of_descr(std::string_view d) {
    if (d == "<u1") return NpyType::uint8;
    for (std::size_t i = 0; i < types.size(); ++i)
        if (types[i].descr == d) return static_cast<NpyType>(i);
    if (!d.empty() && d[0] == '>')
        fail(cat("descr ", in_quotes(d), " is big-endian; only little-endian ('<') arrays are read (save a.astype('<",
                 d.substr(1), "') instead)"));
    std::string supported;
    for (const TypeInfo& t : types)
        supported += cat(supported.empty() ? "" : ", ", in_quotes(t.descr), " (", t.name, ")");
    fail(cat("unsupported descr ", in_quotes(d), "; supported: ", supported));
}

std::size_t data_bytes(const NpyArray& a) { return a.shape.elements() * itemsize(a.type); }

void check_array(const NpyArray& a, const char* what) {
    if (a.bytes.size() != data_bytes(a))
        throw std::invalid_argument(cat(what, ": an NpyArray of ", to_string(a.type), ' ', a.shape.to_string(),
                                        " needs ", data_bytes(a), " bytes, it holds ", a.bytes.size()));
}

// ---- the .npy header: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } ----

struct Header {
    NpyType type = NpyType::float32;
    autodiff::Shape shape;
};

class HeaderParser {
  public:
    explicit HeaderParser(std::string_view text) : s_(text) {}

    Header parse() {
        std::optional<std::string_view> descr_value;
        std::optional<bool> fortran;
        std::optional<autodiff::Shape> shape;
        expect('{', "'{'");
        while (!accept('}')) {
            const std::size_t key_at = pos_;
            const std::string_view key = string_literal("a key or '}'");
            expect(':', cat("':' after key ", in_quotes(key)));
            const bool repeated =
                (key == "descr" && descr_value) || (key == "fortran_order" && fortran) || (key == "shape" && shape);
            if (repeated) fail(cat("header byte ", key_at, ": key ", in_quotes(key), " appears twice"));
            if (key == "descr") {
                skip_space();
                if (pos_ < s_.size() && s_[pos_] == '[') fail("descr is a list: structured arrays are not supported");
                descr_value = string_literal("a string for descr");
            } else if (key == "fortran_order") {
                fortran = boolean();
            } else if (key == "shape") {
                shape = tuple();
            } else {
                fail(cat("header byte ", key_at, ": unexpected key ", in_quotes(key),
                         " (a .npy header holds exactly 'descr', 'fortran_order' and 'shape')"));
            }
            if (!accept(',')) {
                expect('}', "',' or '}'");
                break;
            }
        }
        skip_space();
        if (pos_ + 1 != s_.size() || s_[pos_] != '\n') error("a newline ending the header");
        if (!descr_value) fail("the header lacks the key 'descr'");
        if (!fortran) fail("the header lacks the key 'fortran_order'");
        if (!shape) fail("the header lacks the key 'shape'");
        const NpyType type = type_of_descr(*descr_value);
        if (*fortran)
            fail("fortran_order is True: Fortran-ordered (column-major) arrays are not read; save "
                 "np.ascontiguousarray(a) instead");
        return {type, *shape};
    }

  private:
    [[noreturn]] void error(std::string_view expected) const {
        std::string found = "the end of the header";
        if (pos_ < s_.size()) {
            const auto c = static_cast<unsigned char>(s_[pos_]);
            found = c >= 0x20 && c < 0x7f ? in_quotes(std::string(1, static_cast<char>(c)))
                                          : cat("byte 0x", hex_bytes(Span(&c, 1)));
        }
        fail(cat("malformed header at byte ", pos_, ": expected ", expected, ", found ", found));
    }
    void skip_space() {
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
    }
    bool accept(char c) {
        skip_space();
        if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
        return false;
    }
    void expect(char c, std::string_view what) {
        if (!accept(c)) error(what);
    }
    std::string_view string_literal(std::string_view what) {
        skip_space();
        if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) error(what);
        const char quote = s_[pos_++];
        const std::size_t begin = pos_;
        while (pos_ < s_.size() && s_[pos_] != quote) {
            if (s_[pos_] == '\\' || s_[pos_] == '\n') error(cat("the closing quote ", quote));
            ++pos_;
        }
        if (pos_ >= s_.size()) error(cat("the closing quote ", quote));
        return s_.substr(begin, pos_++ - begin);
    }
    bool boolean() {
        skip_space();
        for (const bool value : {false, true}) {
            const std::string_view word = value ? "True" : "False";
            if (s_.substr(pos_, word.size()) == word) {
                pos_ += word.size();
                return value;
            }
        }
        error("True or False for fortran_order");
    }
    autodiff::Shape tuple() {
        expect('(', "'(' opening the shape");
        std::vector<std::size_t> dims;
        bool comma = false;
        while (!accept(')')) {
            if (!dims.empty() && !comma) error("',' or ')' in the shape");
            if (dims.size() == autodiff::Shape::max_rank)
                fail(cat("the shape has more than ", autodiff::Shape::max_rank, " dimensions"));
            dims.push_back(dimension());
            comma = accept(',');
        }
        if (dims.size() == 1 && !comma)
            fail(cat("the shape (", dims[0], ") is not a tuple; one dimension is written (", dims[0], ",)"));
        std::size_t elements = 1;
        for (const std::size_t d : dims) {
            if (d != 0 && elements > autodiff::Shape::max_elements / d) {
                std::string text;
                for (const std::size_t e : dims) text += cat(text.empty() ? "" : ", ", e);
                fail(cat("the shape (", text, ") has more than 2^40 elements"));
            }
            elements *= d;
        }
        return autodiff::Shape(std::span<const std::size_t>(dims));
    }
    std::size_t dimension() {
        skip_space();
        const std::size_t begin = pos_;
        if (pos_ < s_.size() && s_[pos_] == '-') {
            ++pos_;
            while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
            fail(cat("the shape has a negative dimension ", s_.substr(begin, pos_ - begin)));
        }
        std::uint64_t value = 0;
        while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
            value = value * 10 + static_cast<std::uint64_t>(s_[pos_++] - '0');
            if (value > autodiff::Shape::max_elements) {
                while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
                fail(cat("the shape has a dimension ", s_.substr(begin, pos_ - begin), " larger than 2^40"));
            }
        }
        if (pos_ == begin) error("a dimension (a non-negative integer)");
        if (s_[begin] == '0' && pos_ - begin > 1)
            fail(cat("the shape has a dimension with a leading zero: ", s_.substr(begin, pos_ - begin)));
        return static_cast<std::size_t>(value);
    }

    std::string_view s_;
    std::size_t pos_ = 0;
};

constexpr std::array<std::uint8_t, 4> zip_magic = {'P', 'K', 3, 4};

/// The header NumPy writes, without its padding and newline.
std::string header_text(const NpyArray& a) {
    std::string shape = "(";
    for (std::size_t i = 0; i < a.shape.rank(); ++i) shape += cat(i ? ", " : "", a.shape[i]);
    shape += a.shape.rank() == 1 ? ",)" : ")";
    std::string text = cat("{'descr': '", descr(a.type), "', 'fortran_order': False, 'shape': ", shape, ", }");
    constexpr std::size_t growth_axis_max_digits = 21; // NumPy's room to grow axis 0 in place
    if (a.shape.rank() > 0) text.append(growth_axis_max_digits - std::to_string(a.shape[0]).size(), ' ');
    return text;
}

} // namespace

std::string_view to_string(NpyType type) { return info(type).name; }
std::string_view descr(NpyType type) { return info(type).descr; }
std::size_t itemsize(NpyType type) { return info(type).itemsize; }

NpyArray parse_npy(std::span<const std::uint8_t> bytes) {
    const std::size_t magic_match = std::min(bytes.size(), npy_magic.size());
    if (!std::equal(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(magic_match), npy_magic.begin())) {
        const bool zip = bytes.size() >= 4 && std::equal(zip_magic.begin(), zip_magic.end(), bytes.begin());
        fail(cat("not a .npy file: it starts with bytes ", hex_bytes(bytes.first(magic_match)),
                 ", not 93 4e 55 4d 50 59", zip ? " (it is a zip archive: an .npz? use read_npz)" : ""));
    }
    if (bytes.size() < 10)
        fail(cat("truncated: ", bytes.size(), " bytes cannot hold a .npy file's magic, version and header length"));
    const unsigned major = bytes[6], minor = bytes[7];
    if (minor != 0 || major < 1 || major > 3)
        fail(cat("unsupported .npy version ", major, '.', minor, " (this reader knows 1.0, 2.0 and 3.0)"));
    const std::size_t prefix = major == 1 ? 10 : 12;
    if (bytes.size() < prefix)
        fail(cat("truncated: ", bytes.size(), " bytes cannot hold a version ", major, ".0 prefix"));
    const std::uint64_t header_length =
        major == 1 ? get_le<std::uint16_t>(bytes, 8) : std::uint64_t{get_le<std::uint32_t>(bytes, 8)};
    if (header_length > bytes.size() - prefix)
        fail(cat("header length ", header_length, " runs past the end of the input (", bytes.size() - prefix,
                 " bytes follow the length field)"));
    if (header_length > max_npy_header_bytes)
        fail(cat("header length ", header_length, " exceeds the limit of ", max_npy_header_bytes, " bytes"));
    const std::string_view text(reinterpret_cast<const char*>(bytes.data() + prefix), header_length);
    const Header header = HeaderParser(text).parse();
    const Span data = bytes.subspan(prefix + header_length);
    const std::uint64_t need = std::uint64_t{header.shape.elements()} * itemsize(header.type);
    const auto describe = [&] { return cat("shape ", header.shape.to_string(), " of ", to_string(header.type)); };
    if (data.size() < need)
        fail(cat("truncated: ", describe(), " needs ", need, " data bytes, the input holds ", data.size()));
    if (data.size() > need)
        fail(cat(data.size() - need, " trailing bytes after the ", need, " data bytes of ", describe()));
    return NpyArray{header.type, header.shape, Bytes(data.begin(), data.end())};
}

NpyArray read_npy(const std::filesystem::path& path) {
    const Bytes bytes = located<npy_error>(cat("cannot read .npy file ", in_quotes(path.string()), ": "),
                                           [&] { return read_file_bounded(path, max_npy_file_bytes); });
    return located<npy_error>(cat(in_quotes(path.string()), ": "), [&] { return parse_npy(bytes); });
}

std::vector<std::uint8_t> npy_bytes(const NpyArray& array) {
    check_array(array, "npy_bytes");
    const std::string text = header_text(array);
    const auto padding_for = [&](std::size_t prefix) { return 64 - (prefix + text.size() + 1) % 64; };
    const std::size_t length_bytes = text.size() + 1 + padding_for(10) > max16 ? 4 : 2; // version 1.0 if it fits
    const std::size_t padding = padding_for(8 + length_bytes);
    Bytes out(npy_magic.begin(), npy_magic.end());
    out.push_back(length_bytes == 2 ? 1 : 2);
    out.push_back(0);
    const std::size_t header_length = text.size() + padding + 1;
    if (length_bytes == 2)
        put_le(out, static_cast<std::uint16_t>(header_length));
    else
        put_le(out, static_cast<std::uint32_t>(header_length));
    out.insert(out.end(), text.begin(), text.end());
    out.insert(out.end(), padding, ' ');
    out.push_back('\n');
    out.insert(out.end(), array.bytes.begin(), array.bytes.end());
    return out;
}

void write_npy(const std::filesystem::path& path, const NpyArray& array) {
    const Bytes bytes = npy_bytes(array);
    located<npy_error>(cat("cannot write .npy file ", in_quotes(path.string()), ": "),
                       [&] { write_file_atomically(path, bytes); });
}

autodiff::Tensor to_tensor(const NpyArray& array) {
    check_array(array, "to_tensor");
    using autodiff::Dtype;
    const std::size_t n = array.shape.elements();
    if (array.type == NpyType::float32 || array.type == NpyType::float16) {
        autodiff::Tensor t = autodiff::Tensor::uninitialized(
            array.shape, array.type == NpyType::float32 ? Dtype::float32 : Dtype::float16);
        if (n > 0) std::memcpy(t.raw(), array.bytes.data(), array.bytes.size());
        return t;
    }
    autodiff::Tensor t = autodiff::Tensor::uninitialized(array.shape);
    const std::span<float> out = t.data<float>();
    const std::uint8_t* in = array.bytes.data();
    const auto widen = [&]<class T>(T) {
        for (std::size_t i = 0; i < n; ++i) {
            T v;
            std::memcpy(&v, in + i * sizeof(T), sizeof(T));
            out[i] = static_cast<float>(v);
        }
    };
    switch (array.type) {
    case NpyType::float64:
        widen(double{});
        break;
    case NpyType::uint8:
        widen(std::uint8_t{});
        break;
    case NpyType::int32:
        widen(std::int32_t{});
        break;
    case NpyType::int64:
        widen(std::int64_t{});
        break;
    case NpyType::float32:
    case NpyType::float16:
        break;
    }
    return t;
}

NpyArray from_tensor(const autodiff::Tensor& tensor) {
    using autodiff::Dtype;
    const bool half = tensor.dtype() == Dtype::float16;
    const autodiff::Tensor t = half ? tensor : tensor.to(Dtype::float32);
    NpyArray a{half ? NpyType::float16 : NpyType::float32, t.shape(), Bytes(t.nbytes())};
    if (!a.bytes.empty()) std::memcpy(a.bytes.data(), t.raw(), a.bytes.size());
    return a;
}

} // namespace mixprec::models
