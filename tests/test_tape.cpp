#define BOOST_TEST_MODULE tape
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include "op_checks.hpp"

#include <cmath>

using namespace mixprec::autodiff;
using op_checks::throws_with;

namespace {
Tensor vec(std::vector<float> v, Dtype dtype = Dtype::float32) {
    return Tensor::from_floats(Shape{v.size()}, v, dtype);
}
} // namespace

// d(x*x + x)/dx = 2x + 1, with the fan-out of x accumulated.
BOOST_AUTO_TEST_CASE(fan_out_accumulates) {
    const Tensor x = vec({1.0f, -2.0f, 3.0f});
    GradientTape tape;
    tape.watch(x);
    const Tensor y = x * x + x;
    const Tensor g = tape.gradient(y, {x})[0];
    BOOST_TEST(g.to_floats() == (std::vector<float>{3.0f, -3.0f, 7.0f}), boost::test_tools::per_element());
}

// Only watched tensors (and what is computed from them) are recorded.
BOOST_AUTO_TEST_CASE(records_only_watched) {
    const Tensor a = vec({1, 2}), b = vec({3, 4});
    GradientTape tape;
    tape.watch(a);
    const Tensor c = b * b; // b is not watched: not recorded
    BOOST_TEST(tape.recorded_ops() == 0u);
    const Tensor d = a * c;
    BOOST_TEST(tape.recorded_ops() == 1u);
    const auto g = tape.gradient_or_none(d, {a, b});
    BOOST_TEST(g[0].has_value());
    BOOST_TEST(!g[1].has_value());
}

// Unconnected sources get zeros of their shape and dtype (or nullopt with gradient_or_none).
BOOST_AUTO_TEST_CASE(unconnected_sources) {
    const Tensor a = vec({1, 2}), b = vec({5, 6, 7}, Dtype::bfloat16);
    GradientTape tape({.persistent = true});
    tape.watch(a);
    tape.watch(b);
    const Tensor y = a * a;
    const Tensor gb = tape.gradient(y, {a, b})[1];
    BOOST_TEST(gb.dtype() == Dtype::bfloat16);
    BOOST_TEST(gb.shape() == Shape{3});
    BOOST_TEST(gb.to_floats() == (std::vector<float>{0, 0, 0}), boost::test_tools::per_element());
    BOOST_TEST(!tape.gradient_or_none(y, {b})[0].has_value());
}

// A non-persistent tape answers once; a persistent one any number of times.
BOOST_AUTO_TEST_CASE(persistence) {
    const Tensor x = vec({2});
    {
        GradientTape tape;
        tape.watch(x);
        const Tensor y = square(x);
        BOOST_TEST(tape.gradient(y, {x})[0].flat(0) == 4.0f);
        BOOST_CHECK_THROW(tape.gradient(y, {x}), std::logic_error);
        BOOST_TEST(!tape.is_recording());
    }
    GradientTape tape({.persistent = true});
    tape.watch(x);
    const Tensor y = square(x), z = exp(y);
    BOOST_TEST(tape.gradient(y, {x})[0].flat(0) == 4.0f);
    BOOST_TEST(tape.gradient(z, {x})[0].flat(0) == float(4.0 * std::exp(4.0)), boost::test_tools::tolerance(1e-6f));
}

// Asking for the gradient of something the tape did not record is a clear error.
BOOST_AUTO_TEST_CASE(unrecorded_target) {
    const Tensor x = vec({1});
    GradientTape tape;
    const Tensor y = x * x;
    try {
        tape.gradient(y, {x});
        BOOST_FAIL("no exception");
    } catch (const std::logic_error& e) {
        BOOST_TEST(std::string(e.what()).find("not recorded") != std::string::npos);
    }
}

// stop_gradient blocks the flow; tapes nest and record independently.
BOOST_AUTO_TEST_CASE(stop_gradient_and_nesting) {
    const Tensor x = vec({3});
    GradientTape outer({.persistent = true});
    outer.watch(x);
    GradientTape inner;
    const Tensor y = x * stop_gradient(x); // d/dx treats the second factor as a constant
    BOOST_TEST(outer.gradient(y, {x})[0].flat(0) == 3.0f);
    BOOST_TEST(inner.recorded_ops() == 0u); // inner never watched x
    inner.watch(y);
    const Tensor z = y * y;
    BOOST_TEST(inner.gradient(z, {y})[0].flat(0) == 18.0f);
    BOOST_TEST(outer.gradient(z, {x})[0].flat(0) == 2.0f * 9.0f * 3.0f); // outer saw it too
}

// Trainable variables read inside a tape are watched; their gradient has the working dtype. A variable
// that is not trainable is not watched by reading it: asking for its gradient is an error, unless the tape
// was told to watch it.
BOOST_AUTO_TEST_CASE(variables) {
    Variable w(vec({0.5f, -1.5f}), "w");
    Variable frozen(vec({2.0f, 2.0f}), "frozen", /*trainable=*/false);
    w.set_working_dtype(Dtype::float16);
    {
        GradientTape tape({.persistent = true});
        const Tensor wr = w.read();
        BOOST_TEST(wr.dtype() == Dtype::float16);
        const Tensor y = wr * frozen.read().to(Dtype::float16);
        const auto g = tape.gradient(y, std::vector<Variable>{w});
        BOOST_TEST(g[0].dtype() == Dtype::float16);
        BOOST_TEST(g[0].to_floats() == (std::vector<float>{2.0f, 2.0f}), boost::test_tools::per_element());
        BOOST_TEST((throws_with<std::logic_error>(
            [&] {
                tape.gradient(y, std::vector<Variable>{w, frozen});
            },
            {"'frozen'", "not trainable", "tape.watch(variable)"})));
        BOOST_TEST(!tape.gradient_or_none(y, std::vector<Variable>{frozen})[0].has_value());
    }
    GradientTape tape;
    tape.watch(frozen);
    const Tensor y = w.read() * cast(frozen.read(), Dtype::float16); // cast is recorded, .to() is not
    const auto g = tape.gradient(y, std::vector<Variable>{w, frozen});
    BOOST_TEST(g[1].dtype() == Dtype::float32);
    BOOST_TEST(g[1].to_floats() == (std::vector<float>{0.5f, -1.5f}), boost::test_tools::per_element());
}

// A variable read before the tape existed was never watched by it: its gradient is not zero but an error
// naming it (the cached working copy was reused, so the computation did depend on it). A variable read
// inside the tape that the target does not depend on is unconnected: zeros from gradient(), nullopt from
// gradient_or_none().
BOOST_AUTO_TEST_CASE(variables_the_tape_never_watched_are_an_error) {
    Variable kernel(vec({0.5f, -1.5f}), "dense/kernel"), bias(vec({0.25f, 0.25f}), "dense/bias");
    Variable unused(vec({1.0f, 2.0f, 3.0f}), "head/kernel");
    const Tensor x = vec({1.0f, 2.0f});
    const Tensor early = kernel.read(); // before the tape
    {
        GradientTape tape; // not persistent: the refusal comes before the tape is used up
        const Tensor loss = sum(early * x + bias.read());
        (void)unused.read();
        BOOST_TEST((throws_with<std::logic_error>(
            [&] {
                tape.gradient(loss, std::vector<Variable>{bias, kernel});
            },
            {"variable 'dense/kernel' was never read while this tape was recording", "tape.watch(variable)"})));
        BOOST_TEST(tape.is_recording());
        const auto g = tape.gradient(loss, std::vector<Variable>{bias, unused});
        BOOST_TEST(g[0].to_floats() == (std::vector<float>{1.0f, 1.0f}), boost::test_tools::per_element());
        BOOST_TEST(g[1].shape() == Shape{3});
        BOOST_TEST(g[1].to_floats() == (std::vector<float>{0, 0, 0}), boost::test_tools::per_element());
    }
    {
        GradientTape tape;
        const Tensor loss = sum(early * x + bias.read());
        (void)unused.read();
        const auto none = tape.gradient_or_none(loss, std::vector<Variable>{bias, unused, kernel});
        BOOST_TEST(none[0].has_value());
        BOOST_TEST(!none[1].has_value()); // read, unconnected
        BOOST_TEST(!none[2].has_value()); // never watched
    }
    {
        // Reading it again inside the tape gives the same cached value, now watched: the gradient flows.
        GradientTape tape;
        const Tensor loss = sum(kernel.read() * x + bias.read());
        BOOST_TEST(kernel.read().id() == early.id());
        const auto g = tape.gradient(loss, std::vector<Variable>{kernel});
        BOOST_TEST(g[0].to_floats() == (std::vector<float>{1.0f, 2.0f}), boost::test_tools::per_element());
    }
    {
        GradientTape tape({.watch_accessed_variables = false});
        tape.watch(bias);
        const Tensor loss = sum(kernel.read() * x + bias.read());
        BOOST_TEST((throws_with<std::logic_error>([&] { tape.gradient(loss, std::vector<Variable>{kernel}); },
                                                  {"'dense/kernel'", "watch_accessed_variables = false"})));
    }
}

// The working copy is round(master), refreshed only when the master changes.
BOOST_AUTO_TEST_CASE(working_copy_follows_master) {
    Variable v(vec({1.0f + 0x1p-12f}), "v");
    v.set_working_dtype(Dtype::float16);
    const Tensor first = v.read(), again = v.read();
    BOOST_TEST(first.id() == again.id()); // cached
    BOOST_TEST(first.flat(0) == 1.0f);    // 1 + 2^-12 rounds to 1 in float16
    BOOST_TEST(v.value().flat(0) == 1.0f + 0x1p-12f);
    v.master_data()[0] = 3.0f;
    v.mark_changed();
    BOOST_TEST(v.read().flat(0) == 3.0f);
    v.assign(vec({5.0f}, Dtype::bfloat16));
    BOOST_TEST(v.read().flat(0) == 5.0f);
    BOOST_CHECK_THROW(v.assign(vec({1.0f, 2.0f})), shape_error);
}

// Underflow is faithful. Activations x·w are float16; the loss is reduced in float32 and carries a
// factor 1e-8, so d loss / dw ≈ 1e-8 x: in float32 that is fine, in float16 it is below the smallest
// subnormal (6e-8) and becomes exactly zero. Multiplying the float32 loss by 2^16 (loss scaling) gives
// float16 gradients equal to the float32 ones × 2^16, to float16 precision.
BOOST_AUTO_TEST_CASE(float16_underflow_and_loss_scaling) {
    const std::vector<float> xv{0.75f, -1.25f, 1.5f}, wv{0.5f, 1.0f, -0.25f};
    const auto grad = [&](Dtype dtype, float loss_scale) {
        const Tensor x = vec(xv, dtype), w = vec(wv, dtype), tiny = vec({1e-8f, 1e-8f, 1e-8f});
        GradientTape tape;
        tape.watch(w);
        const Tensor loss = scale(cast(x * w, Dtype::float32) * tiny, loss_scale);
        return tape.gradient(loss, {w})[0];
    };
    const Tensor g32 = grad(Dtype::float32, 1.0f), g16 = grad(Dtype::float16, 1.0f);
    const Tensor scaled = grad(Dtype::float16, 65536.0f);
    BOOST_TEST(g16.dtype() == Dtype::float16);
    for (std::size_t i = 0; i < 3; ++i) {
        BOOST_TEST(std::fabs(g32.flat(i)) > 5e-9f); // ≈ 1e-8 x
        BOOST_TEST(g16.flat(i) == 0.0f);            // underflowed, as on hardware
        BOOST_TEST(scaled.flat(i) == g32.flat(i) * 65536.0f, boost::test_tools::tolerance(2e-3f));
    }
}

// A chain of 100,000 ops runs backward iteratively, without overflowing the stack.
BOOST_AUTO_TEST_CASE(deep_chain) {
    const Tensor x = vec({1.0f});
    GradientTape tape;
    tape.watch(x);
    Tensor y = x;
    for (int i = 0; i < 100'000; ++i) y = scale(y, 1.0f);
    BOOST_TEST(tape.recorded_ops() == 100'000u);
    BOOST_TEST(tape.gradient(y, {x})[0].flat(0) == 1.0f);
}

// A backward function learns which inputs the running tape wants: not one that no watched tensor
// reaches. dense and matmul then skip that gradient, and the others keep their bits.
BOOST_AUTO_TEST_CASE(backward_functions_skip_gradients_nobody_wants) {
    const Tensor a = vec({1, 2}), c = vec({3, 4});
    std::vector<bool> seen;
    {
        GradientTape tape;
        tape.watch(a);
        const Tensor y = a * c;
        const Tensor z = y + y;
        record(z, {&y, &c}, [&](const Tensor& dz) {
            seen = {gradient_needed(0), gradient_needed(1)};
            return Gradients{dz, dz};
        });
        const auto g = tape.gradient_or_none(z, {a, c});
        BOOST_TEST(g[0].has_value());
        BOOST_TEST(!g[1].has_value()); // c was never watched: its gradient is not even accumulated
    }
    BOOST_TEST(seen == (std::vector<bool>{true, false}), boost::test_tools::per_element());
    BOOST_TEST(gradient_needed(0)); // outside a backward pass, every gradient is wanted

    const Tensor x = Tensor::from_floats(Shape{3, 4}, std::vector<float>{1, -2, 3, 0.5f, 2, 1, -1, 4, 0.25f, 3, -2, 1});
    const Tensor w = Tensor::from_floats(Shape{4, 2}, std::vector<float>{0.5f, -1, 2, 1, -3, 0.25f, 1, 2});
    const Tensor b = vec({0.5f, -0.5f});
    const auto dense_grads = [&](bool watch_x) {
        GradientTape tape;
        if (watch_x) tape.watch(x);
        tape.watch(w), tape.watch(b);
        const Tensor y = dense(x, w, b);
        return tape.gradient_or_none(y * y, {x, w, b});
    };
    const auto all = dense_grads(true), without_x = dense_grads(false);
    BOOST_TEST(all[0].has_value());
    BOOST_TEST(!without_x[0].has_value());
    for (std::size_t i : {1, 2})
        BOOST_TEST(without_x[i]->to_floats() == all[i]->to_floats(), boost::test_tools::per_element());
}
