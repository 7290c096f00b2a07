// Uses an installed mixprec through its umbrella header, as the README shows; exits non-zero if
// anything is off.
#include <mixprec/mixprec.hpp>

#include <cstdio>
#include <vector>

namespace {

/// A model of one's own, as the README's residual example: layers from track(), the forward pass in call().
class Residual : public mixprec::models::Model {
  public:
    Residual() : Model("residual") {}

  private:
    mixprec::models::Dense& stem_ = track(mixprec::models::Dense(8, "relu"));
    mixprec::models::Dense& inner_ = track(mixprec::models::Dense(8));
    mixprec::models::Dense& head_ = track(mixprec::models::Dense(2));

    mixprec::autodiff::Tensor call(const mixprec::autodiff::Tensor& x,
                                   const mixprec::models::CallContext& context) override {
        const auto h = stem_(x, context);
        return head_(h + inner_(h, context), context);
    }
};

} // namespace

int main() {
    using namespace mixprec;
    using autodiff::Tensor;

    autodiff::Variable w(Tensor::full({784, 10}, 0.01f), "w");
    w.set_working_dtype(autodiff::Dtype::float16);
    amp::LossScaleOptimizer opt{std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-3f})};

    const Tensor x = Tensor::full({32, 784}, 0.5f, autodiff::Dtype::float16);
    const std::vector<std::int32_t> labels(32, 3);
    autodiff::GradientTape tape;
    const Tensor logits = autodiff::matmul(x, w.read());
    const Tensor loss = autodiff::sparse_categorical_crossentropy(labels, logits);
    auto grads = tape.gradient(opt.scale_loss(loss), std::vector{w});
    const bool applied = opt.apply(grads, {w});

    Residual residual;
    residual.build({4}, 1);
    const bool model_ok =
        residual(Tensor::full({3, 4}, 1.0f)).shape() == autodiff::Shape{3, 2} && residual.variables().size() == 6;

    const bool ok = model_ok && applied && logits.dtype() == autodiff::Dtype::float16 &&
                    grads[0].dtype() == autodiff::Dtype::float16 && opt.iterations() == 1 &&
                    w.value().at({0, 3}) > 0.01f && w.value().at({0, 0}) < 0.01f;
    std::printf("mixprec %s: loss %.4f, step %s, scale %g (%s)\n", MIXPREC_VERSION_STRING, loss.flat(0),
                applied ? "applied" : "skipped", opt.scale(), ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}
