// Uses the installed library through its umbrella header; exits non-zero if anything is off.
#include <mixprec/mixprec.hpp>

#include <cstdio>

int main() {
    using namespace mixprec::autodiff;
    const Tensor a = Tensor::full(Shape{2, 3}, 1.5f, Dtype::float16);
    const Tensor b = Tensor::full(Shape{3, 2}, 2.0f, Dtype::float16);
    const Tensor c = kernels::matmul(a, b);
    const bool ok = c.dtype() == Dtype::float16 && c.shape() == Shape{2, 2} && c.at({1, 1}) == 9.0f;
    std::printf("mixprec %s: %s -> %g (%s)\n", MIXPREC_VERSION_STRING, c.description().c_str(), c.at({1, 1}),
                ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}
