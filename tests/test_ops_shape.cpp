#define BOOST_TEST_MODULE ops_shape
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include "op_checks.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>

using namespace mixprec::autodiff;

namespace {

/// Uniform values in ±[lo, hi].
Tensor random(const Shape& shape, unsigned seed, float lo = 0.1f, float hi = 2.0f) {
    return op_checks::uniform(shape, lo, hi, seed);
}

/// 0, 1, 2, ... in `dtype`.
Tensor iota(const Shape& shape, Dtype dtype = Dtype::float32) {
    std::vector<float> v(shape.elements());
    std::iota(v.begin(), v.end(), 0.0f);
    return Tensor::from_floats(shape, v, dtype);
}

// Shape ops only move data: values and gradients are copied bit for bit, so the half-precision
// gradients differ from float32 ones only through the rounding of the gradcheck's weights (and, for
// broadcast_to, the one rounding of the float32 sums), both within 2 units of rounding; 4 leaves room.
constexpr double f16_tol = 4 * 0x1p-11, bf16_tol = 4 * 0x1p-8;

void check(const std::string& name, const Function& f, const std::vector<Tensor>& inputs) {
    op_checks::check_gradients(name, f, inputs, f16_tol, bf16_tol);
}

std::vector<float> floats(const Tensor& t) { return t.to_floats(); }

bool same_bytes(const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

/// Runs f and expects a shape_error whose message contains every one of `parts`.
template <class F>
void expect_shape_error(F f, std::initializer_list<const char*> parts) {
    try {
        f();
        BOOST_ERROR("no shape_error thrown");
    } catch (const shape_error& e) {
        const std::string message = e.what();
        for (const char* part : parts)
            BOOST_TEST(message.find(part) != std::string::npos, message << " lacks " << part);
    }
}

} // namespace

BOOST_AUTO_TEST_CASE(reshape_values_identity_and_gradient) {
    const Tensor x = iota(Shape{2, 3});
    const Tensor y = reshape(x, Shape{3, 1, 2});
    BOOST_TEST(y.shape() == (Shape{3, 1, 2}));
    BOOST_TEST(y.id() != x.id());
    BOOST_TEST(floats(y) == floats(x), boost::test_tools::per_element());
    check("reshape (2,3)->(3,1,2)",
          [](const auto& in) {
              return reshape(in[0], Shape{3, 1, 2});
          },
          {random(Shape{2, 3}, 1)});
    check("reshape ()->(1,1)", [](const auto& in) { return reshape(in[0], Shape{1, 1}); }, {random(Shape{}, 2)});
    check("reshape (2,2)->(4)", [](const auto& in) { return reshape(in[0], Shape{4}); }, {random(Shape{2, 2}, 3)});
    BOOST_CHECK_THROW(reshape(x, Shape{4}), shape_error);
}

// Large transposes run in pieces of rows on every thread, each piece starting mid-tensor: every element
// lands where the index arithmetic written out here puts it, for 4-, 2- and 1-byte elements (their bits
// numbered: all distinct for 4 and 2 bytes, modulo 251 for 1), with the last axis kept (rows copied
// whole) and moved.
BOOST_AUTO_TEST_CASE(transpose_in_pieces_puts_every_element_in_place) {
    const Shape shape{64, 16, 4, 16}; // 65,536 elements
    for (Dtype dtype : {Dtype::float32, Dtype::float16, Dtype::float8_e4m3})
        for (const std::vector<std::size_t>& perm : {std::vector<std::size_t>{0, 2, 1, 3}, {3, 1, 0, 2}}) {
            const std::size_t width = size_of(dtype);
            Tensor x = Tensor::uninitialized(shape, dtype);
            const auto word = [width](const Tensor& t, std::size_t i) {
                std::uint32_t w = 0;
                std::memcpy(&w, static_cast<const std::byte*>(t.raw()) + i * width, width);
                return w;
            };
            for (std::size_t i = 0; i < shape.elements(); ++i) {
                const auto w = static_cast<std::uint32_t>(width == 1 ? i % 251 : i);
                std::memcpy(static_cast<std::byte*>(x.raw()) + i * width, &w, width);
            }
            const Tensor t = transpose(x, perm);
            std::array<std::size_t, 4> out{}, in{};
            for (std::size_t k = 0; k < 4; ++k) out[k] = shape[perm[k]];
            BOOST_REQUIRE(t.shape() == (Shape{out[0], out[1], out[2], out[3]}));
            std::size_t flat = 0, wrong = 0;
            for (std::size_t a = 0; a < out[0]; ++a)
                for (std::size_t b = 0; b < out[1]; ++b)
                    for (std::size_t c = 0; c < out[2]; ++c)
                        for (std::size_t d = 0; d < out[3]; ++d, ++flat) {
                            const std::array<std::size_t, 4> i{a, b, c, d};
                            for (std::size_t k = 0; k < 4; ++k) in[perm[k]] = i[k];
                            const std::size_t from = ((in[0] * shape[1] + in[1]) * shape[2] + in[2]) * shape[3] + in[3];
                            wrong += word(t, flat) != word(x, from);
                        }
            BOOST_TEST(wrong == 0u, name_of(dtype) << " permutation " << perm[0] << perm[1] << perm[2] << perm[3]);
        }
}

BOOST_AUTO_TEST_CASE(transpose_values_and_gradients) {
    const Tensor x = iota(Shape{2, 3});
    const Tensor t = transpose(x); // reversed axes: (3, 2)
    BOOST_TEST(t.shape() == (Shape{3, 2}));
    BOOST_TEST(floats(t) == (std::vector<float>{0, 3, 1, 4, 2, 5}), boost::test_tools::per_element());
    const Tensor x3 = iota(Shape{2, 3, 4});
    const Tensor p = transpose(x3, {1, 2, 0}); // y[j, k, i] = x[i, j, k]
    BOOST_TEST(p.shape() == (Shape{3, 4, 2}));
    BOOST_TEST(p.at({2, 1, 1}) == x3.at({1, 2, 1}));
    BOOST_TEST(p.at({0, 3, 0}) == x3.at({0, 0, 3}));
    BOOST_TEST(transpose(Tensor::full(Shape{}, 5.0f)).flat(0) == 5.0f); // rank 0: nothing to permute

    check("transpose (2,3)", [](const auto& in) { return transpose(in[0]); }, {random(Shape{2, 3}, 4)});
    check("transpose (2,3,4) 1,2,0",
          [](const auto& in) {
              return transpose(in[0], {1, 2, 0});
          },
          {random(Shape{2, 3, 4}, 5)});
    check("transpose (2,3,4) 2,0,1",
          [](const auto& in) {
              return transpose(in[0], {2, 0, 1});
          },
          {random(Shape{2, 3, 4}, 6)});
    check("transpose (3) identity", [](const auto& in) { return transpose(in[0]); }, {random(Shape{3}, 7)});
}

BOOST_AUTO_TEST_CASE(slice_values_and_gradients) {
    const Tensor x = iota(Shape{2, 3, 4});
    const Tensor s = slice(x, 1, 1, 3);
    BOOST_TEST(s.shape() == (Shape{2, 2, 4}));
    BOOST_TEST(s.at({1, 0, 2}) == x.at({1, 1, 2}));
    const Tensor last = slice(x, -1, 3, 4);
    BOOST_TEST(last.shape() == (Shape{2, 3, 1}));
    BOOST_TEST(floats(last) == (std::vector<float>{3, 7, 11, 15, 19, 23}), boost::test_tools::per_element());
    BOOST_TEST(slice(x, 0, 1, 1).size() == 0u); // empty slices are allowed

    // The gradient scatters dy into zeros.
    GradientTape tape;
    const Tensor v = iota(Shape{5});
    tape.watch(v);
    const Tensor g = tape.gradient(sum(slice(v, 0, 1, 3)), {v})[0];
    BOOST_TEST(floats(g) == (std::vector<float>{0, 1, 1, 0, 0}), boost::test_tools::per_element());

    check("slice axis 0", [](const auto& in) { return slice(in[0], 0, 1, 2); }, {random(Shape{3, 4}, 8)});
    check("slice axis -1", [](const auto& in) { return slice(in[0], -1, 1, 4); }, {random(Shape{2, 3, 5}, 9)});
    check("slice rank 1", [](const auto& in) { return slice(in[0], 0, 0, 2); }, {random(Shape{4}, 10)});
}

BOOST_AUTO_TEST_CASE(concat_values_and_gradients) {
    const Tensor a = iota(Shape{2, 1}), b = Tensor::full(Shape{2, 2}, 9.0f);
    const Tensor c = concat({a, b}, -1);
    BOOST_TEST(c.shape() == (Shape{2, 3}));
    BOOST_TEST(floats(c) == (std::vector<float>{0, 9, 9, 1, 9, 9}), boost::test_tools::per_element());
    BOOST_TEST(floats(concat({a, a}, 0)) == (std::vector<float>{0, 1, 0, 1}), boost::test_tools::per_element());

    check("concat axis 0",
          [](const auto& in) {
              return concat({in[0], in[1]}, 0);
          },
          {random(Shape{1, 3}, 11), random(Shape{2, 3}, 12)});
    check("concat axis -1 three",
          [](const auto& in) {
              return concat({in[0], in[1], in[2]}, -1);
          },
          {random(Shape{2, 2, 1}, 13), random(Shape{2, 2, 3}, 14), random(Shape{2, 2, 2}, 15)});
    check("concat axis 1 of rank 3",
          [](const auto& in) {
              return concat({in[0], in[1]}, 1);
          },
          {random(Shape{2, 2, 3}, 16), random(Shape{2, 1, 3}, 17)});
    check("concat the same tensor twice",
          [](const auto& in) {
              return concat({in[0], in[0]}, 0);
          },
          {random(Shape{3}, 18)});
}

BOOST_AUTO_TEST_CASE(broadcast_to_values_and_gradients) {
    const Tensor x = iota(Shape{3, 1});
    const Tensor y = broadcast_to(x, Shape{2, 3, 2});
    BOOST_TEST(y.shape() == (Shape{2, 3, 2}));
    BOOST_TEST(floats(y) == (std::vector<float>{0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2}), boost::test_tools::per_element());
    BOOST_TEST(floats(broadcast_to(Tensor::full(Shape{}, 4.0f), Shape{2})) == (std::vector<float>{4, 4}),
               boost::test_tools::per_element());
    BOOST_TEST(broadcast_to(x, Shape{3, 1}).id() != x.id());

    check("broadcast_to (3,1)->(2,3,4)",
          [](const auto& in) {
              return broadcast_to(in[0], Shape{2, 3, 4});
          },
          {random(Shape{3, 1}, 19)});
    check("broadcast_to ()->(2,2)",
          [](const auto& in) {
              return broadcast_to(in[0], Shape{2, 2});
          },
          {random(Shape{}, 20)});
    check("broadcast_to (1,3)->(1,3)",
          [](const auto& in) {
              return broadcast_to(in[0], Shape{1, 3});
          },
          {random(Shape{1, 3}, 21)});
}

// Data movement never rounds: every bit pattern survives, NaN payloads and negative zero included,
// in each dtype, and so do the gradients.
BOOST_AUTO_TEST_CASE(data_movement_is_exact_in_every_dtype) {
    for (Dtype dtype :
         {Dtype::float32, Dtype::float16, Dtype::bfloat16, Dtype::cbfloat16, Dtype::float8_e4m3, Dtype::float8_e5m2}) {
        Tensor x(Shape{2, 3, 4}, dtype);
        auto* bytes = static_cast<unsigned char*>(x.raw());
        for (std::size_t i = 0; i < x.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
        const Tensor back = transpose(transpose(x, {2, 0, 1}), {1, 2, 0});
        BOOST_TEST(same_bytes(back, x), name_of(dtype));
        const Tensor joined = concat({slice(x, 1, 0, 1), slice(x, 1, 1, 3)}, 1);
        BOOST_TEST(same_bytes(joined, x), name_of(dtype));
        BOOST_TEST(same_bytes(slice(broadcast_to(x, Shape{2, 2, 3, 4}), 0, 1, 2).reshape(x.shape()), x),
                   name_of(dtype));

        GradientTape tape;
        tape.watch(x);
        const Tensor y = transpose(slice(x, -1, 1, 3));
        const Tensor dy = random(y.shape(), 22).to(dtype);
        const Tensor g = tape.gradient(mul(y, dy), {x})[0]; // seeded with ones: the gradient is dy moved back
        BOOST_TEST(g.dtype() == dtype);
        BOOST_TEST(same_bytes(slice(g, -1, 1, 3), transpose(dy)), name_of(dtype));
        BOOST_TEST(same_bytes(slice(g, -1, 0, 1), Tensor(Shape{2, 3, 1}, dtype)), name_of(dtype));
    }
}

BOOST_AUTO_TEST_CASE(shape_errors_name_the_shapes) {
    const Tensor x = iota(Shape{2, 3}), y = iota(Shape{2, 4});
    expect_shape_error([&] { transpose(x, {0, 0}); }, {"(0, 0)", "(2, 3)"});
    expect_shape_error([&] { transpose(x, {0}); }, {"(0)", "(2, 3)"});
    expect_shape_error([&] { transpose(x, {0, 2}); }, {"(0, 2)", "(2, 3)"});
    expect_shape_error([&] { slice(x, 1, 2, 4); }, {"[2, 4)", "axis 1", "(2, 3)"});
    expect_shape_error([&] { slice(x, 0, 2, 1); }, {"[2, 1)", "(2, 3)"});
    expect_shape_error([&] { slice(x, 2, 0, 1); }, {"axis 2", "(2, 3)"});
    expect_shape_error([&] { slice(x, -3, 0, 1); }, {"axis -3", "(2, 3)"});
    expect_shape_error([&] { slice(Tensor(), 0, 0, 1); }, {"axis 0", "()"});
    expect_shape_error([&] { concat({x, y}, 0); }, {"(2, 3)", "(2, 4)", "axis 0"});
    expect_shape_error([&] { concat({x, iota(Shape{2, 3, 1})}, 0); }, {"(2, 3)", "(2, 3, 1)"});
    expect_shape_error([&] { concat({x, y}, 2); }, {"axis 2", "(2, 3)"});
    expect_shape_error([&] { concat({}, 0); }, {"concat"});
    expect_shape_error([&] { broadcast_to(x, Shape{3, 3}); }, {"(2, 3)", "(3, 3)"});
    expect_shape_error([&] { broadcast_to(x, Shape{3}); }, {"(2, 3)", "(3)"});
    expect_shape_error([&] { reshape(x, Shape{5}); }, {"(2, 3)", "(5)"});
    BOOST_CHECK_THROW(concat({x, iota(Shape{2, 1}, Dtype::float16)}, 1), dtype_error);
}
