#define BOOST_TEST_MODULE npy
#include <boost/test/unit_test.hpp>

// NumPy arrays: .npy and .npz round trips, files written by NumPy itself (tests/fixtures/numpy_*, from
// make_npy_fixtures.py), the conversions to and from tensors, hostile inputs, and ArrayDataset.

#include <mixprec/mixprec.hpp>

#include <mixprec/models/data/array_dataset.hpp>
#include <mixprec/models/io/npy.hpp>
#include <mixprec/models/io/npz.hpp>

#include "op_checks.hpp"
#include "scratch_dir.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

using namespace mixprec;
using autodiff::Dtype;
using autodiff::Shape;
using autodiff::Tensor;
using models::ArrayDataset;
using models::dataset_error;
using models::npy_error;
using models::NpyArray;
using models::NpyType;
using models::NpzArrays;
using op_checks::throws_with;
namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

namespace {

const fs::path fixtures = MIXPREC_FIXTURES;

constexpr std::array<NpyType, 6> all_types = {NpyType::float32, NpyType::float64, NpyType::float16,
                                              NpyType::uint8,   NpyType::int32,   NpyType::int64};

Bytes read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const fs::path& p, const Bytes& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

template <class T>
NpyArray array_of(NpyType type, const Shape& shape, const std::vector<T>& values) {
    BOOST_REQUIRE(values.size() == shape.elements() && sizeof(T) == models::itemsize(type));
    NpyArray a{type, shape, Bytes(values.size() * sizeof(T))};
    if (!values.empty()) std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
    return a;
}

template <class T>
std::vector<T> values_of(const NpyArray& a) {
    BOOST_REQUIRE(a.bytes.size() % sizeof(T) == 0);
    std::vector<T> v(a.bytes.size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), a.bytes.data(), a.bytes.size());
    return v;
}

NpyArray random_array(NpyType type, const Shape& shape, std::mt19937& gen) {
    NpyArray a{type, shape, Bytes(shape.elements() * models::itemsize(type))};
    for (auto& b : a.bytes) b = static_cast<std::uint8_t>(gen());
    return a;
}

/// A .npy file of version 1.0 with `header` (padded with spaces to 64 bytes and ended by a newline unless
/// `raw`) and `data` after it.
Bytes npy_with_header(std::string header, const Bytes& data, bool raw = false) {
    if (!raw) {
        header.append(63 - (10 + header.size()) % 64, ' ');
        header += '\n';
    }
    Bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    out.push_back(static_cast<std::uint8_t>(header.size()));
    out.push_back(static_cast<std::uint8_t>(header.size() >> 8));
    out.insert(out.end(), header.begin(), header.end());
    out.insert(out.end(), data.begin(), data.end());
    return out;
}

Bytes f4_data(std::size_t n) { return Bytes(n * 4, 0); }

// ---- zip archives by hand ----

std::uint32_t crc32(const Bytes& data) {
    std::uint32_t c = 0xffffffffu;
    for (const std::uint8_t b : data) {
        c ^= b;
        for (int k = 0; k < 8; ++k) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
}

std::uint32_t le32(const Bytes& b, std::size_t at) {
    return std::uint32_t{b[at]} | std::uint32_t{b[at + 1]} << 8 | std::uint32_t{b[at + 2]} << 16 |
           std::uint32_t{b[at + 3]} << 24;
}
std::uint16_t le16(const Bytes& b, std::size_t at) { return static_cast<std::uint16_t>(b[at] | b[at + 1] << 8); }
void set16(Bytes& b, std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 2; ++i) b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void set32(Bytes& b, std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}
template <class T>
void put(Bytes& b, T v) {
    for (std::size_t i = 0; i < sizeof(T); ++i)
        b.push_back(static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * i)));
}

/// Where the records of an archive without extra fields or comments (npz_bytes writes such) begin.
struct Layout {
    std::vector<std::size_t> local, central;
    std::size_t end = 0;
    explicit Layout(const Bytes& zip) {
        end = zip.size() - 22;
        std::size_t c = le32(zip, end + 16);
        for (unsigned i = 0; i < le16(zip, end + 10); ++i) {
            central.push_back(c);
            local.push_back(le32(zip, c + 42));
            c += 46 + le16(zip, c + 28);
        }
    }
    /// Offset of the data of member i.
    std::size_t data(const Bytes& zip, std::size_t i) const { return local[i] + 30 + le16(zip, local[i] + 26); }
};

struct Member {
    std::string name;
    std::uint16_t method;
    std::uint32_t crc;
    std::uint64_t size;
    Bytes data; // as stored in the archive
};

std::vector<Member> members_of(const Bytes& zip) {
    const Layout l(zip);
    std::vector<Member> members;
    for (std::size_t i = 0; i < l.central.size(); ++i) {
        const std::size_t c = l.central[i], d = l.data(zip, i);
        members.push_back({std::string(zip.begin() + static_cast<std::ptrdiff_t>(c + 46),
                                       zip.begin() + static_cast<std::ptrdiff_t>(c + 46 + le16(zip, c + 28))),
                           le16(zip, c + 10), le32(zip, c + 16), le32(zip, c + 24),
                           Bytes(zip.begin() + static_cast<std::ptrdiff_t>(d),
                                 zip.begin() + static_cast<std::ptrdiff_t>(d + le32(zip, c + 20)))});
    }
    return members;
}

/// The ways other zip writers lay out the same members.
struct ZipStyle {
    bool zip64_local = false;   // sizes 0xffffffff in the local header, in its ZIP64 field (as NumPy writes)
    bool zip64_central = false; // sizes and offset 0xffffffff in the central directory, in its ZIP64 field
    bool zip64_end = false;     // a ZIP64 end record and locator, the classic end record's fields 0xff..
    bool descriptor = false;    // flag 3: zeros in the local header, a data descriptor after the data
    bool descriptor_signature = true;
    std::string comment;
};

Bytes build_zip(const std::vector<Member>& members, const ZipStyle& s) {
    Bytes out, directory;
    for (const Member& m : members) {
        const std::uint64_t offset = out.size(), compressed = m.data.size();
        const std::uint16_t flags = s.descriptor ? 8 : 0;
        put<std::uint32_t>(out, 0x04034b50);
        put<std::uint16_t>(out, 45);
        put(out, flags);
        put(out, m.method);
        put<std::uint32_t>(out, 0x00210000); // 1980-01-01 00:00
        put<std::uint32_t>(out, s.descriptor ? 0 : m.crc);
        put<std::uint32_t>(out, s.zip64_local ? 0xffffffff : s.descriptor ? 0 : compressed);
        put<std::uint32_t>(out, s.zip64_local ? 0xffffffff : s.descriptor ? 0 : m.size);
        put<std::uint16_t>(out, static_cast<std::uint16_t>(m.name.size()));
        put<std::uint16_t>(out, s.zip64_local ? 20 : 0);
        out.insert(out.end(), m.name.begin(), m.name.end());
        if (s.zip64_local) {
            put<std::uint16_t>(out, 1);
            put<std::uint16_t>(out, 16);
            put<std::uint64_t>(out, s.descriptor ? 0 : m.size);
            put<std::uint64_t>(out, s.descriptor ? 0 : compressed);
        }
        out.insert(out.end(), m.data.begin(), m.data.end());
        if (s.descriptor) {
            if (s.descriptor_signature) put<std::uint32_t>(out, 0x08074b50);
            put(out, m.crc);
            if (s.zip64_local) {
                put<std::uint64_t>(out, compressed);
                put<std::uint64_t>(out, m.size);
            } else {
                put<std::uint32_t>(out, static_cast<std::uint32_t>(compressed));
                put<std::uint32_t>(out, static_cast<std::uint32_t>(m.size));
            }
        }
        put<std::uint32_t>(directory, 0x02014b50);
        put<std::uint16_t>(directory, 45);
        put<std::uint16_t>(directory, 45);
        put(directory, flags);
        put(directory, m.method);
        put<std::uint32_t>(directory, 0x00210000);
        put(directory, m.crc);
        put<std::uint32_t>(directory, s.zip64_central ? 0xffffffff : compressed);
        put<std::uint32_t>(directory, s.zip64_central ? 0xffffffff : m.size);
        put<std::uint16_t>(directory, static_cast<std::uint16_t>(m.name.size()));
        put<std::uint16_t>(directory, s.zip64_central ? 28 : 0);
        put<std::uint16_t>(directory, 0);
        put<std::uint16_t>(directory, 0);
        put<std::uint16_t>(directory, 0);
        put<std::uint32_t>(directory, 0);
        put<std::uint32_t>(directory, s.zip64_central ? 0xffffffff : offset);
        directory.insert(directory.end(), m.name.begin(), m.name.end());
        if (s.zip64_central) {
            put<std::uint16_t>(directory, 1);
            put<std::uint16_t>(directory, 24);
            put<std::uint64_t>(directory, m.size);
            put<std::uint64_t>(directory, compressed);
            put<std::uint64_t>(directory, offset);
        }
    }
    const std::uint64_t directory_offset = out.size();
    out.insert(out.end(), directory.begin(), directory.end());
    if (s.zip64_end) {
        const std::uint64_t record = out.size();
        put<std::uint32_t>(out, 0x06064b50);
        put<std::uint64_t>(out, 44);
        put<std::uint16_t>(out, 45);
        put<std::uint16_t>(out, 45);
        put<std::uint32_t>(out, 0);
        put<std::uint32_t>(out, 0);
        put<std::uint64_t>(out, members.size());
        put<std::uint64_t>(out, members.size());
        put<std::uint64_t>(out, directory.size());
        put<std::uint64_t>(out, directory_offset);
        put<std::uint32_t>(out, 0x07064b50);
        put<std::uint32_t>(out, 0);
        put<std::uint64_t>(out, record);
        put<std::uint32_t>(out, 1);
    }
    put<std::uint32_t>(out, 0x06054b50);
    put<std::uint32_t>(out, 0);
    put<std::uint16_t>(out, s.zip64_end ? 0xffff : members.size());
    put<std::uint16_t>(out, s.zip64_end ? 0xffff : members.size());
    put<std::uint32_t>(out, s.zip64_end ? 0xffffffff : directory.size());
    put<std::uint32_t>(out, s.zip64_end ? 0xffffffff : directory_offset);
    put<std::uint16_t>(out, static_cast<std::uint16_t>(s.comment.size()));
    out.insert(out.end(), s.comment.begin(), s.comment.end());
    return out;
}

NpzArrays sample_arrays() {
    return {{"x", array_of<float>(NpyType::float32, Shape{2, 3}, {-1, -0.5f, 0, 0.5f, 1, 1.5f})},
            {"labels", array_of<std::int64_t>(NpyType::int64, Shape{3}, {2, 0, 1})},
            {"pixels", array_of<std::uint8_t>(NpyType::uint8, Shape{2, 2}, {0, 20, 40, 60})}};
}

/// Parses; true when it loads, false when it throws npy_error; anything else fails the test.
template <class F>
bool loads(F f) {
    try {
        f();
        return true;
    } catch (const npy_error&) {
        return false;
    } catch (const std::exception& e) {
        BOOST_ERROR("an exception other than npy_error: " << e.what());
        return false;
    }
}

/// ArrayDataset's input from a .npy file (the bridge a caller writes: models/data/array_dataset.hpp).
ArrayDataset::Array from_file(const fs::path& path) {
    NpyArray a = models::read_npy(path);
    return {std::string(to_string(a.type)), a.shape, std::move(a.bytes), path.string()};
}

ArrayDataset::Array dataset_array(const NpyArray& a, std::string source) {
    return {std::string(to_string(a.type)), a.shape, a.bytes, std::move(source)};
}

} // namespace

// ---- .npy ----

BOOST_AUTO_TEST_CASE(npy_round_trips_are_bit_exact_for_every_type_and_shape) {
    std::mt19937 gen(7);
    const std::vector<Shape> shapes = {
        Shape{}, Shape{0}, Shape{5}, Shape{2, 3}, Shape{2, 0, 4}, Shape{1, 2, 1, 2, 1, 2, 1, 2}, Shape{123456, 0}};
    for (const NpyType type : all_types)
        for (const Shape& shape : shapes) {
            const NpyArray a = random_array(type, shape, gen);
            const Bytes bytes = models::npy_bytes(a);
            BOOST_TEST((models::parse_npy(bytes) == a), models::to_string(type) << ' ' << shape);
            const std::size_t header = 10 + le16(bytes, 8);
            BOOST_TEST(header % 64 == 0u); // the data starts aligned, as NumPy writes it
            BOOST_TEST(bytes.size() == header + a.bytes.size());
        }
    ScratchDir dir("npy");
    const NpyArray a = random_array(NpyType::float16, Shape{3, 4}, gen);
    models::write_npy(dir.path / "a.npy", a);
    BOOST_TEST((models::read_npy(dir.path / "a.npy") == a));
    BOOST_TEST(!fs::exists(dir.path / "a.npy.tmp"));
}

BOOST_AUTO_TEST_CASE(written_npy_files_are_the_bytes_numpy_writes) {
    for (const char* name : {"numpy_f4.npy", "numpy_f2.npy", "numpy_f8.npy", "numpy_u1.npy", "numpy_i4.npy",
                             "numpy_i8.npy", "numpy_empty.npy"}) {
        const Bytes file = read_bytes(fixtures / name);
        BOOST_REQUIRE(!file.empty());
        BOOST_TEST((models::npy_bytes(models::read_npy(fixtures / name)) == file), name);
    }
}

BOOST_AUTO_TEST_CASE(numpy_fixtures_load_with_their_values) {
    const NpyArray f4 = models::read_npy(fixtures / "numpy_f4.npy");
    BOOST_TEST((f4.type == NpyType::float32 && f4.shape == Shape{2, 3}));
    BOOST_TEST(values_of<float>(f4) == (std::vector<float>{-1, -0.5f, 0, 0.5f, 1, 1.5f}),
               boost::test_tools::per_element());

    const NpyArray f2 = models::read_npy(fixtures / "numpy_f2.npy");
    BOOST_TEST((f2.type == NpyType::float16 && f2.shape == Shape{4}));
    // 0.5, -2, 65504 (the largest float16), 2^-24 (the smallest subnormal)
    BOOST_TEST(values_of<std::uint16_t>(f2) == (std::vector<std::uint16_t>{0x3800, 0xc000, 0x7bff, 0x0001}),
               boost::test_tools::per_element());

    const NpyArray f8 = models::read_npy(fixtures / "numpy_f8.npy");
    BOOST_TEST((f8.type == NpyType::float64 && f8.shape == Shape{}));
    BOOST_TEST(values_of<double>(f8)[0] == 0.1);

    const NpyArray u1 = models::read_npy(fixtures / "numpy_u1.npy");
    BOOST_TEST((u1.type == NpyType::uint8 && u1.shape == Shape{3, 2, 2}));
    for (std::size_t i = 0; i < 12; ++i) BOOST_TEST(u1.bytes[i] == 20 * i);

    const NpyArray i4 = models::read_npy(fixtures / "numpy_i4.npy");
    BOOST_TEST((i4.type == NpyType::int32 && i4.shape == Shape{4}));
    BOOST_TEST(values_of<std::int32_t>(i4) == (std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), -1,
                                                                         0, std::numeric_limits<std::int32_t>::max()}),
               boost::test_tools::per_element());

    const NpyArray i8 = models::read_npy(fixtures / "numpy_i8.npy");
    BOOST_TEST((i8.type == NpyType::int64 && i8.shape == Shape{3}));
    BOOST_TEST(values_of<std::int64_t>(i8) == (std::vector<std::int64_t>{2, 0, 1}), boost::test_tools::per_element());

    const NpyArray empty = models::read_npy(fixtures / "numpy_empty.npy");
    BOOST_TEST((empty.type == NpyType::float32 && empty.shape == Shape{0, 3} && empty.bytes.empty()));
}

BOOST_AUTO_TEST_CASE(the_header_grammar_accepts_what_python_writes) {
    const Bytes data = f4_data(6);
    const NpyArray expected{NpyType::float32, Shape{2, 3}, data};
    for (const char* header : {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                               "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",
                               "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,3,)}",
                               "  {\t'descr':'<f4','fortran_order':False,'shape':( 2 , 3 ) , }\t"})
        BOOST_TEST((models::parse_npy(npy_with_header(header, data)) == expected), header);
    const NpyArray one =
        models::parse_npy(npy_with_header("{'descr': '<u1', 'fortran_order': False, 'shape': (3,), }", Bytes{1, 2, 3}));
    BOOST_TEST((one.type == NpyType::uint8 && one.shape == Shape{3}));
    const NpyArray scalar =
        models::parse_npy(npy_with_header("{'descr': '<i8', 'fortran_order': False, 'shape': (), }", Bytes(8, 0)));
    BOOST_TEST((scalar.shape == Shape{}));
    // Versions 2.0 and 3.0: a four-byte header length.
    for (std::uint8_t version : {2, 3}) {
        Bytes v = npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data);
        v[6] = version;
        v.insert(v.begin() + 10, {0, 0});
        BOOST_TEST((models::parse_npy(v) == expected));
    }
}

BOOST_AUTO_TEST_CASE(npy_errors_name_what_is_wrong) {
    const auto parse = [](const Bytes& b) { return [b] { (void)models::parse_npy(b); }; };
    const auto header = [&](const std::string& h, const Bytes& data = f4_data(6)) {
        return parse(npy_with_header(h, data));
    };
    BOOST_TEST(throws_with<npy_error>([] { (void)models::read_npy(fixtures / "numpy_fortran.npy"); },
                                      {"numpy_fortran.npy", "fortran_order is True"}));
    BOOST_TEST(throws_with<npy_error>([] { (void)models::read_npy(fixtures / "numpy_big_endian.npy"); },
                                      {"numpy_big_endian.npy", "'>f4'", "big-endian"}));
    BOOST_TEST(throws_with<npy_error>([] { (void)models::read_npy(fixtures / "no_such_file.npy"); },
                                      {"cannot read .npy file", "no_such_file.npy"}));
    BOOST_TEST(
        throws_with<npy_error>(parse(Bytes{'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0, 0}), {"not a .npy file", "read_npz"}));
    BOOST_TEST(throws_with<npy_error>(parse(Bytes{'h', 'e', 'l', 'l', 'o'}), {"not a .npy file", "68 65 6c 6c 6f"}));

    Bytes good = read_bytes(fixtures / "numpy_f4.npy");
    Bytes b = good;
    b[6] = 4;
    BOOST_TEST(throws_with<npy_error>(parse(b), {"version 4.0"}));
    b = good;
    set16(b, 8, 5000);
    BOOST_TEST(throws_with<npy_error>(parse(b), {"header length 5000", "runs past the end"}));
    b = good;
    set16(b, 8, le16(good, 8) - 8); // the header ends early: its newline is not last, and data grows
    BOOST_TEST(throws_with<npy_error>(parse(b), {"malformed header", "newline"}));
    // A header longer than NumPy's limit, although the file holds it.
    std::string long_header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    long_header.append(20000, ' ');
    Bytes v2 = npy_with_header(long_header, f4_data(6));
    v2[6] = 2;
    set16(v2, 8, 0);
    v2.insert(v2.begin() + 10, {0, 0});
    set32(v2, 8, static_cast<std::uint32_t>(v2.size() - 12 - 24));
    BOOST_TEST(throws_with<npy_error>(parse(v2), {"exceeds the limit of 10000"}));

    BOOST_TEST(throws_with<npy_error>(header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }"),
                                      {"negative dimension -2"}));
    BOOST_TEST(throws_with<npy_error>(
        header("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", f4_data(1)),
        {"more than 8 dimensions"}));
    BOOST_TEST(throws_with<npy_error>(
        header("{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 1048576, 2), }"), {"more than 2^40"}));
    BOOST_TEST(throws_with<npy_error>(
        header("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }"),
        {"99999999999999999999999", "larger than 2^40"}));
    BOOST_TEST(throws_with<npy_error>(header("{'descr': '<f4', 'fortran_order': False, 'shape': (6), }"),
                                      {"not a tuple", "(6,)"}));
    BOOST_TEST(throws_with<npy_error>(header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f4_data(5)),
                                      {"truncated", "needs 24 data bytes", "holds 20"}));
    BOOST_TEST(throws_with<npy_error>(header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f4_data(7)),
                                      {"4 trailing bytes", "(2, 3)"}));
    BOOST_TEST(throws_with<npy_error>(header("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }"),
                                      {"fortran_order is True"}));
    BOOST_TEST(throws_with<npy_error>(header("{'descr': '>i8', 'fortran_order': False, 'shape': (2, 3), }"),
                                      {"'>i8'", "big-endian"}));
    BOOST_TEST(throws_with<npy_error>(header("{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }"),
                                      {"unsupported descr '<c8'", "'<f4' (float32)"}));
    BOOST_TEST(throws_with<npy_error>(header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }"),
                                      {"structured"}));
    BOOST_TEST(
        throws_with<npy_error>(header("{'descr': '<f4', 'shape': (2, 3), }"), {"lacks the key 'fortran_order'"}));
    BOOST_TEST(throws_with<npy_error>(header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}"),
                                      {"unexpected key 'extra'"}));
    BOOST_TEST(
        throws_with<npy_error>(header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'shape': (2, 3)}"),
                               {"'shape' appears twice"}));
    BOOST_TEST(throws_with<npy_error>(header("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }"),
                                      {"malformed header at byte 34", "True or False", "found '0'"}));
    BOOST_TEST(throws_with<npy_error>(
        parse(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f4_data(6), true)),
        {"newline"}));
}

BOOST_AUTO_TEST_CASE(every_truncation_of_a_npy_file_is_refused) {
    const Bytes good = read_bytes(fixtures / "numpy_f4.npy");
    for (std::size_t n = 0; n < good.size(); ++n)
        BOOST_TEST(!loads([&] { (void)models::parse_npy(std::span(good).first(n)); }), n << " bytes");
}

BOOST_AUTO_TEST_CASE(every_single_byte_change_of_a_npy_header_loads_or_is_refused) {
    const Bytes good = read_bytes(fixtures / "numpy_f4.npy");
    const std::size_t header_end = 10 + le16(good, 8);
    std::size_t loaded = 0, refused = 0;
    for (std::size_t i = 0; i < header_end; ++i)
        for (int value = 0; value < 256; ++value) {
            if (value == good[i]) continue;
            Bytes b = good;
            b[i] = static_cast<std::uint8_t>(value);
            (loads([&] { (void)models::parse_npy(b); }) ? loaded : refused)++;
        }
    BOOST_TEST_MESSAGE(loaded << " changed headers load, " << refused << " are refused");
    BOOST_TEST(loaded > 0u); // a space of padding turned into a tab, the quotes of a key changed, ...
    BOOST_TEST(refused > 0u);
}

// ---- .npz ----

BOOST_AUTO_TEST_CASE(npz_round_trips_stored_and_deflated) {
    std::mt19937 gen(3);
    NpzArrays arrays = sample_arrays();
    for (const NpyType type : all_types)
        arrays.emplace_back(std::string("random_") + std::string(models::to_string(type)),
                            random_array(type, Shape{3, 5}, gen));
    arrays.emplace_back("scalar", random_array(NpyType::float64, Shape{}, gen));
    arrays.emplace_back("empty", random_array(NpyType::float32, Shape{0, 7}, gen));
    arrays.emplace_back("zeros", NpyArray{NpyType::float32, Shape{100, 10}, Bytes(4000, 0)});
    arrays.emplace_back("dir/name ü", random_array(NpyType::uint8, Shape{2}, gen));
    ScratchDir dir("npy");
    for (const bool compress : {false, true}) {
        const Bytes bytes = models::npz_bytes(arrays, compress);
        BOOST_TEST((models::parse_npz(bytes) == arrays));
        BOOST_TEST((models::npz_bytes(arrays, compress) == bytes)); // no timestamps: the same bytes every time
        const fs::path file = dir.path / (compress ? "c.npz" : "s.npz");
        models::write_npz(file, arrays, compress);
        BOOST_TEST((models::read_npz(file) == arrays));
        BOOST_TEST((read_bytes(file) == bytes));
    }
    BOOST_TEST(models::npz_bytes(arrays, true).size() + 3000 < models::npz_bytes(arrays, false).size());
    BOOST_TEST(models::parse_npz(models::npz_bytes({})).empty());
}

BOOST_AUTO_TEST_CASE(numpy_npz_fixtures_load_with_their_values) {
    const NpyArray f4 = models::read_npy(fixtures / "numpy_f4.npy");
    const NpyArray i8 = models::read_npy(fixtures / "numpy_i8.npy");
    const NpyArray f8 = models::read_npy(fixtures / "numpy_f8.npy");
    const NpyArray u1 = models::read_npy(fixtures / "numpy_u1.npy");
    BOOST_TEST(
        (models::read_npz(fixtures / "numpy_arrays.npz") == NpzArrays{{"x", f4}, {"labels", i8}, {"scalar", f8}}));
    BOOST_TEST((models::read_npz(fixtures / "numpy_compressed.npz") == NpzArrays{{"x", f4}, {"pixels", u1}}));
}

BOOST_AUTO_TEST_CASE(zip64_records_comments_and_data_descriptors_are_read) {
    const NpzArrays arrays = sample_arrays();
    for (const bool compress : {false, true}) {
        const std::vector<Member> members = members_of(models::npz_bytes(arrays, compress));
        for (int bits = 0; bits < 32; ++bits) {
            const ZipStyle style{.zip64_local = (bits & 1) != 0,
                                 .zip64_central = (bits & 2) != 0,
                                 .zip64_end = (bits & 4) != 0,
                                 .descriptor = (bits & 8) != 0,
                                 .descriptor_signature = (bits & 16) != 0,
                                 .comment = bits % 3 == 0 ? "a comment" : ""};
            BOOST_TEST((models::parse_npz(build_zip(members, style)) == arrays), "style " << bits << " " << compress);
        }
    }
}

BOOST_AUTO_TEST_CASE(every_truncation_of_an_npz_is_refused) {
    for (const bool compress : {false, true}) {
        const Bytes good = models::npz_bytes(sample_arrays(), compress);
        for (std::size_t n = 0; n < good.size(); ++n)
            BOOST_TEST(!loads([&] { (void)models::parse_npz(std::span(good).first(n)); }), n << " bytes");
    }
    const Bytes numpy = read_bytes(fixtures / "numpy_compressed.npz");
    for (std::size_t n = 0; n < numpy.size(); ++n)
        BOOST_TEST(!loads([&] { (void)models::parse_npz(std::span(numpy).first(n)); }), n << " bytes");
}

BOOST_AUTO_TEST_CASE(every_single_byte_change_of_an_npz_loads_or_is_refused) {
    const NpzArrays small = {{"a", array_of<float>(NpyType::float32, Shape{2}, {1, 2})},
                             {"b", array_of<std::uint8_t>(NpyType::uint8, Shape{3}, {1, 2, 3})}};
    for (const Bytes& good : {models::npz_bytes(small, false), models::npz_bytes(small, true),
                              read_bytes(fixtures / "numpy_compressed.npz")}) {
        const NpzArrays expected = models::parse_npz(good);
        std::size_t loaded = 0, refused = 0, different = 0;
        for (std::size_t i = 0; i < good.size(); ++i)
            for (int value = 0; value < 256; ++value) {
                if (value == good[i]) continue;
                Bytes b = good;
                b[i] = static_cast<std::uint8_t>(value);
                NpzArrays got;
                (loads([&] { got = models::parse_npz(b); }) ? loaded : refused)++;
                if (!got.empty() && got != expected) ++different;
            }
        // What loads is what was written: a change that passes every check is in a field nothing reads
        // (a date, a time, an attribute, a version).
        BOOST_TEST_MESSAGE(loaded << " changed archives load, " << refused << " are refused");
        BOOST_TEST(different == 0u);
        BOOST_TEST(refused > 0u);
    }
}

BOOST_AUTO_TEST_CASE(npz_errors_name_the_member_and_what_is_wrong) {
    const auto parse = [](const Bytes& b) { return [b] { (void)models::parse_npz(b); }; };
    const Bytes stored = models::npz_bytes(sample_arrays(), false);
    const Layout l(stored);
    Bytes b;

    b = stored; // a damaged data byte of member 0
    b[l.data(b, 0) + 130] ^= 1;
    BOOST_TEST(throws_with<npy_error>(parse(b), {"member 'x.npy'", "CRC-32 mismatch"}));

    { // member 1 renamed to member 0's name
        const NpzArrays two = {{"a", array_of<float>(NpyType::float32, Shape{1}, {1})},
                               {"b", array_of<float>(NpyType::float32, Shape{1}, {2})}};
        b = models::npz_bytes(two);
        const Layout t(b);
        b[t.local[1] + 30] = 'a';
        b[t.central[1] + 46] = 'a';
        BOOST_TEST(throws_with<npy_error>(parse(b), {"member 'a.npy'", "appears twice"}));
    }

    b = stored; // the central directory lies about a size; the local header does not
    set32(b, l.central[0] + 20, le32(b, l.central[0] + 20) + 1);
    set32(b, l.central[0] + 24, le32(b, l.central[0] + 24) + 1);
    BOOST_TEST(throws_with<npy_error>(parse(b), {"member 'x.npy'", "its local header declares compressed size"}));

    b = stored; // both lie alike: member 0 now reaches into member 1
    for (const std::size_t at : {l.central[0] + 20, l.central[0] + 24, l.local[0] + 18, l.local[0] + 22})
        set32(b, at, le32(b, at) + 10);
    BOOST_TEST(throws_with<npy_error>(parse(b), {"'x.npy'", "'labels.npy'", "overlap"}));

    b = stored; // the last member's sizes reach into the central directory
    for (const std::size_t at : {l.central[2] + 20, l.central[2] + 24, l.local[2] + 18, l.local[2] + 22})
        set32(b, at, le32(b, at) + 10);
    BOOST_TEST(throws_with<npy_error>(parse(b), {"member 'pixels.npy'", "run into the central directory"}));

    b = stored; // the end record declares more entries than there are
    set16(b, l.end + 8, 4);
    set16(b, l.end + 10, 4);
    BOOST_TEST(throws_with<npy_error>(parse(b), {"declares 4 entries", "holds at most 3"}));
    b = stored; // ... or fewer
    set16(b, l.end + 8, 2);
    set16(b, l.end + 10, 2);
    BOOST_TEST(throws_with<npy_error>(parse(b), {"bytes after its 2 entries"}));

    b = stored;
    set16(b, l.end + 10, 0xffff);
    BOOST_TEST(throws_with<npy_error>(parse(b), {"ZIP64"}));

    b = stored;
    for (const std::size_t at : {l.central[1] + 8, l.local[1] + 6}) set16(b, at, 1);
    BOOST_TEST(throws_with<npy_error>(parse(b), {"member 'labels.npy'", "encrypted"}));

    b = stored;
    for (const std::size_t at : {l.central[1] + 10, l.local[1] + 8}) set16(b, at, 12);
    BOOST_TEST(throws_with<npy_error>(parse(b), {"member 'labels.npy'", "compression method 12"}));

    b = stored;
    b[l.central[0] + 46 + 2] = 't'; // x.npy → x.tpy, in the central directory only
    BOOST_TEST(throws_with<npy_error>(parse(b), {"'x.tpy'", "does not end in .npy"}));

    b = stored;
    b[l.local[0] + 30] = 'y';
    BOOST_TEST(throws_with<npy_error>(parse(b), {"member 'x.npy'", "its local header names it 'y.npy'"}));

    const Bytes deflated = models::npz_bytes(sample_arrays(), true);
    const Layout d(deflated);
    b = deflated; // declares more than it inflates to
    for (const std::size_t at : {d.central[0] + 24, d.local[0] + 22}) set32(b, at, le32(b, at) + 1);
    BOOST_TEST(throws_with<npy_error>(parse(b), {"member 'x.npy'", "inflates to 152 bytes", "declares 153"}));
    b = deflated; // declares less
    for (const std::size_t at : {d.central[0] + 24, d.local[0] + 22}) set32(b, at, le32(b, at) - 1);
    BOOST_TEST(throws_with<npy_error>(parse(b), {"member 'x.npy'", "more than its declared size of 151"}));
    b = deflated; // declares more than deflate can hold in its compressed size
    for (const std::size_t at : {d.central[0] + 24, d.local[0] + 22}) set32(b, at, 100'000'000);
    BOOST_TEST(throws_with<npy_error>(parse(b), {"member 'x.npy'", "beyond deflate's largest ratio"}));

    BOOST_TEST(throws_with<npy_error>(parse(read_bytes(fixtures / "numpy_f4.npy")), {"it is a .npy file"}));
    BOOST_TEST(throws_with<npy_error>(parse(Bytes(100, 0)), {"no end-of-central-directory record"}));
    ScratchDir dir("npy");
    write_bytes(dir.path / "bad.npz", Bytes(stored.begin(), stored.end() - 1));
    BOOST_TEST(throws_with<npy_error>([&] { (void)models::read_npz(dir.path / "bad.npz"); },
                                      {"bad.npz", "no end-of-central-directory record"}));

    // A member whose .npy is malformed, with a CRC that fits it: the member's name, then the .npy's error.
    std::vector<Member> members = members_of(stored);
    members[1].data[8] = 200; // header length 200, beyond the member
    members[1].crc = crc32(members[1].data);
    BOOST_TEST(throws_with<npy_error>(parse(build_zip(members, {})), {"member 'labels.npy'", "header length 200"}));
}

BOOST_AUTO_TEST_CASE(npz_writer_refuses_repeated_names) {
    const NpyArray a = array_of<float>(NpyType::float32, Shape{1}, {1});
    BOOST_TEST(throws_with<std::invalid_argument>(
        [&] {
            (void)models::npz_bytes({{"a", a}, {"a", a}});
        },
        {"'a' appears twice"}));
    BOOST_TEST((models::parse_npz(models::npz_bytes({{"", a}})) == NpzArrays{{"", a}})); // member ".npy", as NumPy
    NpyArray wrong = a;
    wrong.bytes.push_back(0);
    BOOST_TEST(
        throws_with<std::invalid_argument>([&] { (void)models::npy_bytes(wrong); }, {"needs 4 bytes", "holds 5"}));
}

// ---- tensors ----

BOOST_AUTO_TEST_CASE(to_tensor_and_from_tensor) {
    std::mt19937 gen(5);
    const NpyArray f4 = random_array(NpyType::float32, Shape{3, 4}, gen);
    const Tensor t4 = models::to_tensor(f4);
    BOOST_TEST((t4.dtype() == Dtype::float32 && t4.shape() == Shape{3, 4}));
    BOOST_TEST(std::memcmp(t4.raw(), f4.bytes.data(), f4.bytes.size()) == 0);
    BOOST_TEST((models::from_tensor(t4) == f4));

    const NpyArray f2 = random_array(NpyType::float16, Shape{5}, gen);
    const Tensor t2 = models::to_tensor(f2);
    BOOST_TEST((t2.dtype() == Dtype::float16 && t2.shape() == Shape{5}));
    BOOST_TEST((models::from_tensor(t2) == f2));

    const NpyArray f8 = array_of<double>(NpyType::float64, Shape{4}, {0.1, -1e300, 1.0 + 0x1p-30, 0x1p-149});
    BOOST_TEST(models::to_tensor(f8).to_floats() ==
                   (std::vector<float>{0.1f, -std::numeric_limits<float>::infinity(), 1.0f, 0x1p-149f}),
               boost::test_tools::per_element());

    const NpyArray u1 = array_of<std::uint8_t>(NpyType::uint8, Shape{3}, {0, 7, 255});
    BOOST_TEST(models::to_tensor(u1).to_floats() == (std::vector<float>{0, 7, 255}), boost::test_tools::per_element());
    const NpyArray i4 = array_of<std::int32_t>(NpyType::int32, Shape{3}, {-5, 16777216, 16777217});
    BOOST_TEST(models::to_tensor(i4).to_floats() == (std::vector<float>{-5, 16777216, 16777216}),
               boost::test_tools::per_element()); // 2^24 + 1 rounds to even
    const NpyArray i8 = array_of<std::int64_t>(NpyType::int64, Shape{2}, {-(std::int64_t{1} << 40), 16777219});
    BOOST_TEST(models::to_tensor(i8).to_floats() == (std::vector<float>{-0x1p40f, 16777220}),
               boost::test_tools::per_element());

    const NpyArray scalar = array_of<float>(NpyType::float32, Shape{}, {2.5f});
    BOOST_TEST((models::to_tensor(scalar).shape() == Shape{} && models::to_tensor(scalar).flat(0) == 2.5f));
    const NpyArray empty{NpyType::int64, Shape{0, 3}, {}};
    BOOST_TEST((models::to_tensor(empty).shape() == Shape{0, 3}));

    // Narrow formats are widened exactly to float32.
    const Tensor wide = op_checks::uniform(Shape{4, 3}, 0.01f, 100.0f, 9);
    for (const Dtype dtype : {Dtype::bfloat16, Dtype::cbfloat16, Dtype::float8_e4m3, Dtype::float8_e5m2}) {
        const Tensor narrow = wide.to(dtype);
        const NpyArray a = models::from_tensor(narrow);
        BOOST_TEST((a.type == NpyType::float32 && a.shape == Shape{4, 3}));
        BOOST_TEST(values_of<float>(a) == narrow.to_floats(), boost::test_tools::per_element());
    }
}

// ---- ArrayDataset ----

BOOST_AUTO_TEST_CASE(array_dataset_from_numpy_files) {
    const ArrayDataset data(from_file(fixtures / "numpy_u1.npy"), from_file(fixtures / "numpy_i8.npy"), 3);
    BOOST_TEST(data.size() == 3u);
    BOOST_TEST((data.example_shape() == Shape{2, 2}));
    BOOST_TEST(data.example_dtype() == "uint8");
    Tensor x;
    std::vector<std::int32_t> labels;
    const std::vector<std::size_t> indices = {2, 0, 2};
    data.batch(indices, x, labels);
    BOOST_TEST((x.dtype() == Dtype::float32 && x.shape() == Shape{3, 2, 2}));
    for (std::size_t b = 0; b < indices.size(); ++b)
        for (std::size_t k = 0; k < 4; ++k)
            BOOST_TEST(x.flat(b * 4 + k) == static_cast<float>(20 * (indices[b] * 4 + k)) / 255.0f);
    BOOST_TEST(labels == (std::vector<std::int32_t>{1, 2, 1}), boost::test_tools::per_element());

    // Errors name the file.
    BOOST_TEST(throws_with<dataset_error>(
        [] { ArrayDataset(from_file(fixtures / "numpy_u1.npy"), from_file(fixtures / "numpy_i8.npy"), 2); },
        {"numpy_i8.npy", "label 2 at index 0", "[0, 2)"}));
    BOOST_TEST(throws_with<dataset_error>(
        [] { ArrayDataset(from_file(fixtures / "numpy_f4.npy"), from_file(fixtures / "numpy_i8.npy"), 3); },
        {"numpy_f4.npy", "holds 2 examples", "numpy_i8.npy", "holds 3 labels"}));
}

BOOST_AUTO_TEST_CASE(array_dataset_batches_equal_the_source_values) {
    std::vector<float> values(5 * 3 * 2);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::ldexp(static_cast<float>(i) - 7.25f, -3);
    const NpyArray x = array_of<float>(NpyType::float32, Shape{5, 3, 2}, values);
    const NpyArray y = array_of<std::int32_t>(NpyType::int32, Shape{5}, {4, 3, 2, 1, 0});
    const ArrayDataset data(dataset_array(x, "x"), dataset_array(y, "y"), 5);
    BOOST_TEST((data.example_shape() == Shape{3, 2}));
    Tensor batch;
    std::vector<std::int32_t> labels;
    data.batch(std::vector<std::size_t>{4, 1}, batch, labels);
    BOOST_TEST((batch.shape() == Shape{2, 3, 2}));
    const std::vector<float> got = batch.to_floats();
    for (std::size_t k = 0; k < 6; ++k) {
        BOOST_TEST(got[k] == values[4 * 6 + k]);
        BOOST_TEST(got[6 + k] == values[1 * 6 + k]);
    }
    BOOST_TEST(labels == (std::vector<std::int32_t>{0, 3}), boost::test_tools::per_element());
    data.batch(std::vector<std::size_t>{}, batch, labels);
    BOOST_TEST((batch.shape() == Shape{0, 3, 2}));
    BOOST_TEST(throws_with<std::out_of_range>(
        [&] {
            data.batch(std::vector<std::size_t>{0, 5}, batch, labels);
        },
        {"index 5", "position 1", "5 examples"}));
    BOOST_TEST((batch.shape() == Shape{0, 3, 2})); // unchanged
}

BOOST_AUTO_TEST_CASE(array_dataset_errors) {
    const NpyArray x = array_of<std::uint8_t>(NpyType::uint8, Shape{3, 2}, {1, 2, 3, 4, 5, 6});
    const NpyArray y = array_of<std::uint8_t>(NpyType::uint8, Shape{3}, {0, 1, 2});
    const auto make = [](const NpyArray& xs, const NpyArray& ys, std::size_t classes) {
        return [=] { ArrayDataset(dataset_array(xs, "x.npy"), dataset_array(ys, "y.npy"), classes); };
    };
    BOOST_CHECK_NO_THROW(make(x, y, 3)());
    BOOST_TEST(throws_with<dataset_error>(make(x, array_of<std::uint8_t>(NpyType::uint8, Shape{2}, {0, 1}), 3),
                                          {"'x.npy' holds 3 examples", "'y.npy' holds 2 labels"}));
    BOOST_TEST(throws_with<dataset_error>(make(x, y, 2), {"'y.npy'", "label 2 at index 2", "outside [0, 2)"}));
    BOOST_TEST(throws_with<dataset_error>(make(x, array_of<std::int64_t>(NpyType::int64, Shape{3}, {0, -1, 0}), 3),
                                          {"label -1 at index 1"}));
    BOOST_TEST(throws_with<dataset_error>(make(x, array_of<std::int32_t>(NpyType::int32, Shape{3}, {0, 1, 1 << 30}), 3),
                                          {"label 1073741824 at index 2"}));
    BOOST_TEST(throws_with<dataset_error>(make(array_of<std::uint8_t>(NpyType::uint8, Shape{3}, {1, 2, 3}), y, 3),
                                          {"'x.npy' has shape (3)", "rank ≥ 2"}));
    BOOST_TEST(throws_with<dataset_error>(make(array_of<std::int32_t>(NpyType::int32, Shape{3, 1}, {1, 2, 3}), y, 3),
                                          {"'x.npy' holds int32 examples"}));
    BOOST_TEST(throws_with<dataset_error>(make(x, array_of<float>(NpyType::float32, Shape{3}, {0, 1, 2}), 3),
                                          {"'y.npy' holds float32 labels"}));
    BOOST_TEST(throws_with<dataset_error>(make(x, array_of<std::uint8_t>(NpyType::uint8, Shape{3, 1}, {0, 1, 2}), 3),
                                          {"'y.npy' has shape (3, 1)"}));
    BOOST_TEST(throws_with<dataset_error>(
        [] {
            ArrayDataset({"float32", Shape{2, 2}, Bytes(15), "x"}, {"uint8", Shape{2}, Bytes(2), "y"}, 2);
        },
        {"'x': float32 (2, 2) needs 16 bytes", "holds 15"}));
    BOOST_TEST(throws_with<std::invalid_argument>(make(x, y, 0), {"num_classes"}));
}
