// A tour of mixprec's storage formats: what each one can hold, where small gradients vanish in it,
// and how scaling the loss (so every gradient is scaled) keeps them.
//
//   formats_tour [--loss-scale S] [--samples N] [--seed N]
#include <mixprec/mixprec.hpp>

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <random>

using namespace mixprec::autodiff;

namespace {

const Dtype narrow_dtypes[] = {Dtype::float16, Dtype::bfloat16, Dtype::cbfloat16, Dtype::float8_e4m3,
                               Dtype::float8_e5m2};

template <class F>
void print_limits(const char* name) {
    using L = std::numeric_limits<F>;
    std::printf("  %-12s %12.6g %12.6g %12.6g %10.3g   %s\n", name, float(L::max()), float(L::min()),
                float(L::denorm_min()), float(L::epsilon()), L::has_infinity ? "inf, NaN" : "NaN only");
}

struct fate {
    double zero = 0, subnormal = 0, overflow = 0; // fractions of the samples
    double error = 0;                             // mean relative error of the unscaled gradients (a lost one counts 1)
};

/// Rounds every gradient * scale to `dtype`, widens, divides by scale in float32: what a mixed-precision
/// step does to a gradient that is stored in `dtype`.
fate round_trip(const std::vector<float>& grads, Dtype dtype, float scale, float smallest_normal) {
    std::vector<float> scaled(grads.size());
    for (std::size_t i = 0; i < grads.size(); ++i) scaled[i] = grads[i] * scale;
    const std::vector<float> back = Tensor::from_floats(Shape{grads.size()}, scaled, dtype).to_floats();
    fate f;
    for (std::size_t i = 0; i < grads.size(); ++i) {
        const float v = back[i];
        if (v == 0.0f)
            f.zero += 1;
        else if (std::isinf(v) || std::isnan(v))
            f.overflow += 1;
        else if (std::fabs(v) < smallest_normal)
            f.subnormal += 1;
        f.error +=
            std::isfinite(v) ? std::min(1.0, std::fabs(double(v / scale) - grads[i]) / std::fabs(grads[i])) : 1.0;
    }
    const double n = double(grads.size());
    f.zero /= n, f.subnormal /= n, f.overflow /= n, f.error /= n;
    return f;
}

float smallest_normal(Dtype dtype) {
    switch (dtype) {
    case Dtype::float16:
        return float(std::numeric_limits<float16>::min());
    case Dtype::bfloat16:
        return float(std::numeric_limits<bfloat16>::min());
    case Dtype::cbfloat16:
        return float(std::numeric_limits<cbfloat16>::min());
    case Dtype::float8_e4m3:
        return float(std::numeric_limits<float8_e4m3>::min());
    case Dtype::float8_e5m2:
        return float(std::numeric_limits<float8_e5m2>::min());
    case Dtype::float32:
        break;
    }
    return std::numeric_limits<float>::min();
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"mixprec formats tour: where small gradients vanish, and how loss scaling keeps them"};
    float loss_scale = 32768.0f;
    std::size_t samples = 1'000'000;
    unsigned seed = 0;
    app.add_option("--loss-scale", loss_scale, "loss scale to compare with no scaling")
        ->check(CLI::Range(1.0f, 1e30f))
        ->capture_default_str();
    app.add_option("--samples", samples, "number of synthetic gradients")
        ->check(CLI::Range(std::size_t{1}, std::size_t{100'000'000}))
        ->capture_default_str();
    app.add_option("--seed", seed, "random seed")->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    std::printf("mixprec %s, instruction-set level: %s\n\n", MIXPREC_VERSION_STRING,
                std::string(name_of(isa())).c_str());
    std::printf("  %-12s %12s %12s %12s %10s   %s\n", "format", "max", "min normal", "min subnormal", "epsilon",
                "specials");
    print_limits<float16>("float16");
    print_limits<bfloat16>("bfloat16");
    print_limits<cbfloat16>("cbfloat16");
    print_limits<float8_e4m3>("float8_e4m3");
    print_limits<float8_e5m2>("float8_e5m2");

    // Gradient magnitudes spread log-uniformly over 2^-34 .. 2^-4, random signs: typical of the small
    // activation gradients that float16 training loses.
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> log2_magnitude(-34.0f, -4.0f);
    std::bernoulli_distribution negative(0.5);
    std::vector<float> grads(samples);
    for (auto& g : grads) g = std::exp2(log2_magnitude(gen)) * (negative(gen) ? -1.0f : 1.0f);

    std::printf("\n%zu gradients, |g| log-uniform in [2^-34, 2^-4]; loss scale %g vs none\n", samples, loss_scale);
    std::printf("  %-12s %-6s %9s %11s %10s %16s\n", "format", "scale", "to zero", "subnormal", "overflow",
                "mean rel. error");
    for (Dtype dtype : narrow_dtypes)
        for (float scale : {1.0f, loss_scale}) {
            const fate f = round_trip(grads, dtype, scale, smallest_normal(dtype));
            std::printf("  %-12s %-6g %8.2f%% %10.2f%% %9.2f%% %16.3e\n", std::string(name_of(dtype)).c_str(), scale,
                        100 * f.zero, 100 * f.subnormal, 100 * f.overflow, f.error);
        }

    // The same product in every format, against float32.
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> av(128 * 256), bv(256 * 64);
    for (auto& v : av) v = normal(gen);
    for (auto& v : bv) v = normal(gen) * 0.0625f;
    const Tensor a = Tensor::from_floats(Shape{128, 256}, av), b = Tensor::from_floats(Shape{256, 64}, bv);
    const std::vector<float> reference = kernels::matmul(a, b).to_floats();
    std::printf("\nmatmul (128, 256) @ (256, 64), operands and result rounded to the format, vs float32\n");
    std::printf("  %-12s %16s\n", "format", "rel. RMS error");
    for (Dtype dtype : narrow_dtypes) {
        const std::vector<float> c = kernels::matmul(a.to(dtype), b.to(dtype)).to_floats();
        double err = 0, norm = 0;
        for (std::size_t i = 0; i < c.size(); ++i) {
            err += (double(c[i]) - reference[i]) * (double(c[i]) - reference[i]);
            norm += double(reference[i]) * reference[i];
        }
        std::printf("  %-12s %16.3e\n", std::string(name_of(dtype)).c_str(), std::sqrt(err / norm));
    }
    return 0;
}
