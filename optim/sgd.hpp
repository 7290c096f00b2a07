#pragma once
/// Stochastic gradient descent with momentum, Nesterov momentum and L2 weight decay (PyTorch's rule).

#include <mixprec/optim/optimizer.hpp>

namespace mixprec::optim {

/// g ← g + wd·w;  b ← g on the first step, else b ← μ·b + g;  g ← g + μ·b (nesterov) or b;  w ← w − lr·g
/// (torch.optim.SGD with dampening 0. Keras's SGD differs: v ← μv − lr·g, w ← w + v, which matches
/// this only while lr is constant.) Elementwise math is float32, rounded as the formulas read (no FMA);
/// from the avx2 level up, elements near underflow (the subnormal buffer of a weight whose gradient
/// stays zero) are computed in double with the same bits, off the CPU's slow path for subnormal numbers.
class SGD final : public SlotOptimizer {
  public:
    struct Options {
        LearningRate learning_rate = 0.01f;
        float momentum = 0;     ///< μ ≥ 0; 0 means no "momentum" slot
        bool nesterov = false;  ///< needs momentum > 0
        float weight_decay = 0; ///< wd ≥ 0, added to the gradient (L2), as in PyTorch
        Clipping clip{};
    };
    /// Throws std::invalid_argument naming a bad option.
    explicit SGD(Options options);
    SGD(); ///< default options (a nested aggregate cannot be a default argument here)

    std::string kind() const override { return "sgd"; }
    const Options& options() const { return options_; }

  protected:
    std::vector<std::string> slot_names() const override;
    void update(std::size_t index, std::span<float> weights, std::span<const float> grad, float lr,
                std::int64_t step) override;

  private:
    Options options_;
};

} // namespace mixprec::optim
