#define BOOST_TEST_MODULE safetensors
#include <boost/test/unit_test.hpp>

// safetensors files: bit-exact round trips in every dtype, the layout the format prescribes, a file
// written by the Python `safetensors` package, weights in and out of variables, and hostile files.

#include <mixprec/mixprec.hpp>

#include "op_checks.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

using namespace mixprec;
using autodiff::Dtype;
using autodiff::Shape;
using autodiff::Tensor;
using autodiff::Variable;
using models::NamedTensor;
using models::safetensors_error;
using op_checks::throws_with;
namespace fs = std::filesystem;

namespace {

std::vector<std::uint8_t> raw_bytes(const Tensor& t) {
    const auto* p = static_cast<const std::uint8_t*>(t.raw());
    return {p, p + t.nbytes()};
}

/// A tensor of `shape` and `dtype` holding random values (any bit pattern the dtype rounds to).
Tensor random_tensor(const Shape& shape, Dtype dtype, unsigned seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> d(0.0f, 3.0f);
    std::vector<float> v(shape.elements());
    for (float& x : v) x = d(gen);
    return Tensor::from_floats(shape, v, dtype);
}

std::uint64_t header_length(const std::vector<std::uint8_t>& b) {
    std::uint64_t n = 0;
    for (std::size_t i = 8; i-- > 0;) n = (n << 8) | b.at(i);
    return n;
}

/// A file made of `header` (JSON text, as given) and `data`.
std::vector<std::uint8_t> file_of(const std::string& header, const std::vector<std::uint8_t>& data = {}) {
    std::vector<std::uint8_t> b(8 + header.size() + data.size());
    for (std::size_t i = 0; i < 8; ++i) b[i] = static_cast<std::uint8_t>(std::uint64_t{header.size()} >> (8 * i));
    std::copy(header.begin(), header.end(), b.begin() + 8);
    std::copy(data.begin(), data.end(), b.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
    return b;
}

bool refused(const std::vector<std::uint8_t>& bytes, std::initializer_list<const char*> parts) {
    return throws_with<safetensors_error>([&] { (void)models::parse_safetensors(bytes); }, parts);
}

struct ScratchFile {
    fs::path path;
    explicit ScratchFile(const std::string& name)
        : path(fs::temp_directory_path() / ("mixprec-safetensors-" + std::to_string(::getpid()) + '-' + name)) {}
    ~ScratchFile() {
        std::error_code ec;
        fs::remove(path, ec);
    }
};

} // namespace

BOOST_AUTO_TEST_CASE(every_dtype_round_trips_bit_exactly) {
    std::vector<NamedTensor> tensors;
    unsigned seed = 0;
    for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::bfloat16, Dtype::float8_e4m3, Dtype::float8_e5m2})
        for (const Shape& shape : {Shape{}, Shape{3}, Shape{2, 3, 5}, Shape{4, 0}}) {
            std::string name(autodiff::name_of(dtype));
            name += '/';
            name += std::to_string(shape.rank());
            tensors.push_back({name, random_tensor(shape, dtype, ++seed)});
        }
    const std::map<std::string, std::string> metadata{{"format", "pt"}, {"note", "π ≈ 3.14"}};
    const auto bytes = models::safetensors_bytes(tensors, metadata);
    BOOST_TEST((8 + header_length(bytes)) % 8 == 0u); // the data begins aligned

    const models::SafetensorsContent back = models::parse_safetensors(bytes);
    BOOST_TEST(back.tensors.size() == tensors.size());
    BOOST_TEST((back.metadata == metadata));
    for (const NamedTensor& t : tensors) {
        BOOST_TEST_CONTEXT(t.name) {
            const Tensor* loaded = back.find(t.name);
            BOOST_TEST_REQUIRE(loaded != nullptr);
            BOOST_TEST((loaded->dtype() == t.tensor.dtype()));
            BOOST_TEST((loaded->shape() == t.tensor.shape()));
            BOOST_TEST(raw_bytes(*loaded) == raw_bytes(t.tensor));
        }
    }
    // Written again, the same bytes.
    BOOST_TEST(models::safetensors_bytes(back.tensors, back.metadata) == bytes);
    BOOST_TEST(models::parse_safetensors(models::safetensors_bytes({})).tensors.empty());
}

// The header as the format prescribes it, checked on its text.
BOOST_AUTO_TEST_CASE(the_header_says_dtype_shape_and_offsets) {
    const std::vector<NamedTensor> tensors = {{"b", Tensor::from_floats(Shape{2}, std::vector<float>{1, 2})},
                                              {"a", Tensor::full(Shape{1, 3}, 0.5f, Dtype::bfloat16)}};
    const auto bytes = models::safetensors_bytes(tensors);
    const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_length(bytes)));
    BOOST_TEST(header.starts_with(R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("a":{"dtype":"BF16","shape":[1,3],"data_offsets":[8,14]}})"),
               header);
    BOOST_TEST(header.find_first_not_of(' ', header.find_last_of('}') + 1) == std::string::npos); // padding
    BOOST_TEST(bytes.size() == 8 + header.size() + 14);
    float first = 0;
    std::memcpy(&first, bytes.data() + 8 + header.size(), 4);
    BOOST_TEST(first == 1.0f);                        // little-endian float32
    BOOST_TEST(bytes[8 + header.size() + 8] == 0x00); // bfloat16 0.5 = 0x3F00, low byte first
    BOOST_TEST(bytes[8 + header.size() + 9] == 0x3F);
}

BOOST_AUTO_TEST_CASE(what_cannot_be_written_is_an_error) {
    const Tensor t(Shape{2});
    BOOST_TEST(throws_with<safetensors_error>(
        [&] {
            models::safetensors_bytes({{{"w", t}, {"w", t}}});
        },
        {"two tensors are called 'w'"}));
    BOOST_TEST(throws_with<safetensors_error>([&] { models::safetensors_bytes({{{"", t}}}); }, {"needs a name"}));
    BOOST_TEST(throws_with<safetensors_error>(
        [&] {
            models::safetensors_bytes({{{"__metadata__", t}}});
        },
        {"cannot be called '__metadata__'"}));
    const Tensor cb(Shape{2}, Dtype::cbfloat16);
    BOOST_TEST(throws_with<safetensors_error>(
        [&] {
            models::safetensors_bytes({{{"w", cb}}});
        },
        {"'w' is cbfloat16", "convert it first"}));
    BOOST_TEST(throws_with<safetensors_error>(
        [&] {
            models::safetensors_bytes({{{"w\xff", t}}});
        },
        {"cannot be written"}));
    BOOST_TEST(throws_with<safetensors_error>(
        [&] {
            models::write_safetensors("/nonexistent-dir/x.safetensors", {{{"w", t}}});
        },
        {"'/nonexistent-dir/x.safetensors'", "cannot create"}));
}

// Written by the Python package (tests/fixtures/make_safetensors_fixture.py): element i of each tensor
// is i/4 - 1, exact in every dtype.
BOOST_AUTO_TEST_CASE(a_file_written_by_the_python_package_loads) {
    const auto content = models::read_safetensors(fs::path(MIXPREC_FIXTURES) / "python.safetensors");
    BOOST_TEST(content.metadata.at("producer") == "safetensors (Python)");
    const std::vector<std::pair<std::string, Dtype>> expected = {{"f32", Dtype::float32},
                                                                 {"f16", Dtype::float16},
                                                                 {"bf16", Dtype::bfloat16},
                                                                 {"f8_e4m3", Dtype::float8_e4m3},
                                                                 {"f8_e5m2", Dtype::float8_e5m2}};
    BOOST_TEST(content.tensors.size() == expected.size() + 1);
    for (const auto& [name, dtype] : expected) {
        BOOST_TEST_CONTEXT(name) {
            const Tensor* t = content.find(name);
            BOOST_TEST_REQUIRE(t != nullptr);
            BOOST_TEST((t->dtype() == dtype));
            BOOST_TEST((t->shape() == Shape{2, 3}));
            const std::vector<float> values = t->to_floats();
            for (std::size_t i = 0; i < values.size(); ++i) BOOST_TEST(values[i] == static_cast<float>(i) / 4 - 1);
        }
    }
    const Tensor* scalar = content.find("scalar");
    BOOST_TEST_REQUIRE(scalar != nullptr);
    BOOST_TEST((scalar->shape() == Shape{}));
    BOOST_TEST(scalar->to_floats().at(0) == 2.5f);
}

BOOST_AUTO_TEST_CASE(weights_go_out_and_come_back_bit_exactly) {
    ScratchFile file("weights.safetensors");
    const std::vector<Variable> vars = {Variable(random_tensor(Shape{4, 3}, Dtype::float32, 1), "dense/kernel"),
                                        Variable(random_tensor(Shape{3}, Dtype::float32, 2), "dense/bias"),
                                        Variable(random_tensor(Shape{3}, Dtype::float32, 3), "norm/mean", false)};
    models::save_weights(file.path, vars, {.metadata = {{"model", "test"}}});
    const auto content = models::read_safetensors(file.path);
    BOOST_TEST(content.metadata.at("model") == "test");
    BOOST_TEST(content.metadata.at("producer") == "mixprec " MIXPREC_VERSION_STRING);
    BOOST_TEST((content.find("dense/kernel")->dtype() == Dtype::float32));

    std::vector<Variable> other = {Variable(Tensor(Shape{4, 3}), "dense/kernel"),
                                   Variable(Tensor(Shape{3}), "dense/bias"),
                                   Variable(Tensor(Shape{3}), "norm/mean", false)};
    other[0].set_working_dtype(Dtype::float16);
    const Tensor stale = other[0].read(); // a working copy from before the load
    models::load_weights(file.path, other);
    for (std::size_t i = 0; i < vars.size(); ++i) BOOST_TEST(raw_bytes(other[i].value()) == raw_bytes(vars[i].value()));
    BOOST_TEST(raw_bytes(other[0].read()) == raw_bytes(vars[0].value().to(Dtype::float16))); // refreshed

    // In float16: rounded once on the way out, widened exactly on the way in.
    models::save_weights(file.path, vars, {.dtype = Dtype::float16});
    BOOST_TEST((models::read_safetensors(file.path).find("dense/bias")->dtype() == Dtype::float16));
    models::load_weights(file.path, other);
    BOOST_TEST(raw_bytes(other[1].value()) == raw_bytes(vars[1].value().to(Dtype::float16).to(Dtype::float32)));
    BOOST_TEST(throws_with<safetensors_error>(
        [&] { models::save_weights(file.path, vars, {.dtype = Dtype::cbfloat16}); }, {"cannot hold cbfloat16"}));
}

// The same through NumPy's .npz, chosen by the file's extension.
BOOST_AUTO_TEST_CASE(weights_go_out_and_come_back_through_npz) {
    ScratchFile file("weights.npz");
    const std::vector<Variable> vars = {Variable(random_tensor(Shape{4, 3}, Dtype::float32, 7), "dense/kernel"),
                                        Variable(random_tensor(Shape{3}, Dtype::float32, 8), "dense/bias")};
    models::save_weights(file.path, vars);
    const models::NpzArrays arrays = models::read_npz(file.path);
    BOOST_TEST(arrays.size() == 2u);
    BOOST_TEST(arrays[0].first == "dense/kernel");
    BOOST_TEST((arrays[0].second.type == models::NpyType::float32));
    std::vector<Variable> other = {Variable(Tensor(Shape{4, 3}), "dense/kernel"),
                                   Variable(Tensor(Shape{3}), "dense/bias")};
    models::load_weights(file.path, other);
    for (std::size_t i = 0; i < vars.size(); ++i) BOOST_TEST(raw_bytes(other[i].value()) == raw_bytes(vars[i].value()));

    models::save_weights(file.path, vars, {.dtype = Dtype::float16});
    BOOST_TEST((models::read_npz(file.path)[1].second.type == models::NpyType::float16));
    models::load_weights(file.path, other);
    BOOST_TEST(raw_bytes(other[1].value()) == raw_bytes(vars[1].value().to(Dtype::float16).to(Dtype::float32)));
    BOOST_TEST(throws_with<models::npy_error>(
        [&] { models::save_weights(file.path, vars, {.dtype = Dtype::bfloat16}); }, {"NumPy has no bfloat16"}));
    BOOST_TEST(throws_with<models::npy_error>([&] { models::load_weights(file.path, {vars[0]}); },
                                              {"'dense/bias' belongs to no variable"}));
}

BOOST_AUTO_TEST_CASE(weights_that_do_not_fit_are_refused_and_nothing_changes) {
    ScratchFile file("model.safetensors");
    const std::vector<Variable> saved = {Variable(Tensor::full(Shape{2, 2}, 1.0f), "w"),
                                         Variable(Tensor::full(Shape{2}, 2.0f), "b")};
    models::save_weights(file.path, saved);
    const auto refused_by = [&](const std::vector<Variable>& vars, std::initializer_list<const char*> parts,
                                models::LoadWeightsOptions options = {}) {
        const bool ok = throws_with<safetensors_error>([&] { models::load_weights(file.path, vars, options); }, parts);
        for (const Variable& v : vars)
            for (float x : v.value().to_floats()) BOOST_TEST(x == 7.0f); // unchanged
        return ok;
    };
    const auto var = [](Shape shape, const char* name) { return Variable(Tensor::full(shape, 7.0f), name); };
    BOOST_TEST(refused_by({var(Shape{2, 2}, "w"), var(Shape{2}, "bias")}, {"no tensor 'bias'"}));
    BOOST_TEST(refused_by({var(Shape{2, 2}, "w"), var(Shape{3}, "b")}, {"'b' has shape (3)", "the file's tensor (2)"}));
    BOOST_TEST(refused_by({var(Shape{2, 2}, "w")}, {"tensor 'b' belongs to no variable", "ignore_extra"}));
    BOOST_TEST(refused_by({}, {"is it built?"}));
    BOOST_TEST(refused_by({var(Shape{2, 2}, "w"), var(Shape{2, 2}, "w")}, {"two variables are called 'w'"},
                          {.ignore_extra = true}));
    std::vector<Variable> only_w = {var(Shape{2, 2}, "w")};
    models::load_weights(file.path, only_w, {.ignore_extra = true});
    BOOST_TEST(only_w[0].value().to_floats() == std::vector<float>(4, 1.0f), boost::test_tools::per_element());
    BOOST_TEST(throws_with<safetensors_error>([&] { models::load_weights(file.path.string() + ".missing", only_w); },
                                              {".missing'", "cannot open"}));
}

// ---- hostile files ----

BOOST_AUTO_TEST_CASE(every_truncation_is_refused) {
    const auto bytes = models::safetensors_bytes(
        {{{"x", random_tensor(Shape{3, 2}, Dtype::float16, 5)}, {"y", random_tensor(Shape{2}, Dtype::float32, 6)}}},
        {{"k", "v"}});
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        const std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
        BOOST_TEST(throws_with<safetensors_error>([&] { (void)models::parse_safetensors(cut); }, {}), n);
    }
}

// Every byte of the header set to every value of a handful: the file loads (the edit left it valid, e.g.
// inside the metadata) or is refused with a safetensors_error, never anything else.
BOOST_AUTO_TEST_CASE(every_header_byte_edit_loads_or_is_refused_cleanly) {
    const auto bytes = models::safetensors_bytes(
        {{{"x", random_tensor(Shape{3, 2}, Dtype::float16, 5)}, {"y", random_tensor(Shape{2}, Dtype::float32, 6)}}},
        {{"k", "v"}});
    std::size_t loaded = 0, refused_count = 0;
    for (std::size_t at = 0; at < 8 + header_length(bytes); ++at)
        for (std::uint8_t value : {0x00, 0x01, 0x20, 0x22, 0x2C, 0x30, 0x39, 0x5B, 0x7B, 0x7D, 0x80, 0xFF}) {
            auto edited = bytes;
            edited[at] = value;
            try {
                (void)models::parse_safetensors(edited);
                ++loaded;
            } catch (const safetensors_error&) {
                ++refused_count;
            }
        }
    BOOST_TEST(refused_count > 0u);
    BOOST_TEST_MESSAGE(loaded << " edits loaded, " << refused_count << " refused");
}

BOOST_AUTO_TEST_CASE(hostile_headers_are_refused_with_what_is_wrong) {
    const std::vector<std::uint8_t> eight(8, 0);
    const auto entry = [](const char* dtype, const char* shape, const char* offsets) {
        return std::string(R"({"t":{"dtype":")") + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets +
               "}}";
    };
    BOOST_TEST(refused({1, 2, 3}, {"too short"}));
    {
        std::vector<std::uint8_t> huge(16, 0);
        huge[3] = 0x10; // 2^28 bytes
        BOOST_TEST(refused(huge, {"exceeds the limit of 16777216"}));
        huge[3] = 0;
        huge[0] = 100;
        BOOST_TEST(refused(huge, {"does not fit", "truncated"}));
    }
    BOOST_TEST(refused(file_of(""), {"not a JSON object"}));
    BOOST_TEST(refused(file_of("[1]"), {"not a JSON object"}));
    BOOST_TEST(refused(file_of("{\"t\":"), {"not valid JSON"}));
    BOOST_TEST(refused(file_of(R"({"t":{},"t":{}})"), {"'t' appears twice"}));
    BOOST_TEST(refused(file_of(R"({"t":{"dtype":"F32","dtype":"F16"}})"), {"'dtype' appears twice"}));
    BOOST_TEST(refused(file_of(R"({"t":{"x":{"y":1}}})"), {"nests an object"}));
    BOOST_TEST(refused(file_of(R"({"t":[1,2]})"), {"array outside a tensor entry"}));
    BOOST_TEST(refused(file_of(R"({"t":{"shape":[[1]]}})"), {"array outside a tensor entry"}));
    BOOST_TEST(refused(file_of(R"({"t":{"shape":[1,1,1,1,1,1,1,1,1]}})"), {"more than 8 entries"}));
    BOOST_TEST(refused(file_of(R"({"t":1})"), {"tensor 't'", "must be an object"}));
    BOOST_TEST(refused(file_of(R"({"t":{"dtype":"F32"}})"), {"needs dtype, shape and data_offsets"}));
    BOOST_TEST(refused(file_of(R"({"t":{"dtype":"F32","shape":[],"data_offsets":[0,4],"x":1}})", {0, 0, 0, 0}),
                       {"unknown field 'x'"}));
    BOOST_TEST(refused(file_of(entry("F64", "[1]", "[0,8]"), eight), {"dtype \"F64\"", "does not read", "F8_E5M2"}));
    BOOST_TEST(refused(file_of(entry("F32", "[-1]", "[0,8]"), eight), {"a dimension must be a non-negative integer"}));
    BOOST_TEST(refused(file_of(entry("F32", "[1.5]", "[0,8]"), eight), {"non-negative integer, got 1.5"}));
    BOOST_TEST(refused(file_of(entry("F32", "[1048576,1048576,2]", "[0,8]"), eight), {"tensor 't'", "2^40"}));
    BOOST_TEST(refused(file_of(entry("F32", "[3]", "[0,8]"), eight), {"takes 12 bytes", "hold 8"}));
    BOOST_TEST(refused(file_of(entry("F32", "[2]", "[8,0]"), eight), {"end before they begin"}));
    BOOST_TEST(refused(file_of(entry("F32", "[2]", "[0]"), eight), {"must be [begin, end]"}));
    BOOST_TEST(refused(file_of(entry("F32", "[2]", "[0,18446744073709551616]"), eight), {"data_offsets[1]"}));
    BOOST_TEST(refused(file_of(entry("F32", "[2]", "[0,8]"), {0, 0, 0, 0}), {"holds 4 bytes", "truncated"}));
    BOOST_TEST(refused(file_of(entry("F32", "[1]", "[0,4]"), eight), {"end at byte 4", "holds 8 bytes"}));
    BOOST_TEST(refused(file_of(entry("F32", "[1]", "[4,8]"), eight), {"bytes [0, 4)", "belong to no tensor"}));
    BOOST_TEST(refused(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                               eight),
                       {"'b'", "overlaps"}));
    BOOST_TEST(refused(file_of(R"({"__metadata__":{"k":1}})"), {"__metadata__ 'k' must be a string"}));
    BOOST_TEST(refused(file_of(R"({"__metadata__":[]})"), {"array outside a tensor entry"}));
    BOOST_TEST(refused(file_of("{\"t\xff\":{}}"), {"not valid JSON"}));
    // Valid: padding after the object, and an empty file of tensors.
    BOOST_TEST(models::parse_safetensors(file_of(entry("F32", "[2]", "[0,8]") + "    ", eight)).tensors.size() == 1u);
    BOOST_TEST(models::parse_safetensors(file_of("{}")).tensors.empty());
}
