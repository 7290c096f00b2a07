#include <mixprec/autodiff/gradcheck.hpp>

#include <mixprec/autodiff/ops_elementwise.hpp>
#include <mixprec/autodiff/tape.hpp>

#include <cmath>
#include <random>
#include <sstream>

namespace mixprec::autodiff {
namespace {

Tensor weights_like(const Tensor& y, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> magnitude(0.5f, 1.5f);
    std::bernoulli_distribution negative(0.5);
    std::vector<float> w(y.size());
    for (auto& v : w) v = magnitude(gen) * (negative(gen) ? -1.0f : 1.0f);
    return Tensor::from_floats(y.shape(), w, y.dtype());
}

/// Gradients of Σ w y with respect to each input, through the tape.
std::vector<Tensor> analytic(const Function& f, const std::vector<Tensor>& inputs, unsigned seed) {
    GradientTape tape;
    for (const Tensor& x : inputs) tape.watch(x);
    const Tensor y = f(inputs);
    const Tensor s = mul(y, weights_like(y, seed)); // seeding with ones gives dy = w
    return tape.gradient(s, inputs);
}

double weighted_sum(const Tensor& y, const Tensor& w) {
    const std::vector<float> a = y.to_floats(), b = w.to_floats();
    double s = 0;
    for (std::size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
    return s;
}

void note(GradcheckResult& r, double error, const std::string& where) {
    if (error > r.max_error) {
        r.max_error = error;
        r.worst = where;
    }
    if (error > 0) r.passed = false;
}

} // namespace

GradcheckResult gradcheck(const Function& f, const std::vector<Tensor>& inputs, GradcheckOptions o) {
    std::vector<Tensor> xs;
    for (const Tensor& x : inputs) xs.push_back(x.to(Dtype::float32).clone());
    const std::vector<Tensor> grads = analytic(f, xs, o.seed);
    const Tensor w = weights_like(f(xs), o.seed);

    GradcheckResult r;
    for (std::size_t k = 0; k < xs.size(); ++k) {
        const std::vector<float> g = grads[k].to_floats();
        for (std::size_t i = 0; i < xs[k].size(); ++i) {
            std::vector<Tensor> moved = xs;
            moved[k] = xs[k].clone();
            float* p = moved[k].data<float>().data() + i;
            const float x0 = *p;
            const float h = static_cast<float>(o.step * std::max(1.0, std::fabs(double(x0))));
            *p = x0 + h;
            const float up = *p;
            const double s_plus = weighted_sum(f(moved), w);
            *p = x0 - h;
            const float down = *p;
            const double s_minus = weighted_sum(f(moved), w);
            const double numeric = (s_plus - s_minus) / (double(up) - double(down));
            const double error = std::fabs(double(g[i]) - numeric) - o.rtol * std::fabs(numeric) - o.atol;
            std::ostringstream where;
            where << "input " << k << " " << xs[k].shape() << " element " << i << ": tape " << g[i]
                  << ", finite differences " << numeric;
            note(r, error, where.str());
        }
    }
    if (r.max_error <= 0) r.passed = true;
    return r;
}

GradcheckResult gradcheck_against_float32(const Function& f, const std::vector<Tensor>& inputs, Dtype dtype,
                                          double rtol, double atol) {
    std::vector<Tensor> narrow, wide;
    for (const Tensor& x : inputs) {
        narrow.push_back(x.to(dtype).clone());
        wide.push_back(narrow.back().to(Dtype::float32));
    }
    const std::vector<Tensor> gn = analytic(f, narrow, 11), gw = analytic(f, wide, 11);
    GradcheckResult r;
    for (std::size_t k = 0; k < inputs.size(); ++k) {
        if (gn[k].dtype() != dtype) {
            note(r, 1.0,
                 "input " + std::to_string(k) + ": gradient is " + gn[k].description() + ", expected " +
                     std::string(name_of(dtype)));
            continue;
        }
        const std::vector<float> a = gn[k].to_floats(), b = gw[k].to_floats();
        double scale = 0;
        for (float v : b) scale = std::max(scale, double(std::fabs(v)));
        for (std::size_t i = 0; i < a.size(); ++i) {
            const double error = std::fabs(double(a[i]) - b[i]) - rtol * std::fabs(double(b[i])) - atol * scale;
            std::ostringstream where;
            where << "input " << k << " " << inputs[k].shape() << " element " << i << ": " << name_of(dtype) << " "
                  << a[i] << ", float32 " << b[i];
            note(r, error, where.str());
        }
    }
    if (r.max_error <= 0) r.passed = true;
    return r;
}

} // namespace mixprec::autodiff
