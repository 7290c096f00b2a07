#pragma once
/// Adam (with AMSGrad) and AdamW, with PyTorch's update rule and Keras's defaults.

#include <mixprec/optim/optimizer.hpp>

namespace mixprec::optim {

/// m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²;  m̂ = m/(1−β1ᵗ);  v̂ = v/(1−β2ᵗ);  w ← w − lr m̂ / (√v̂ + ε)
/// AMSGrad: v_max ← max(v_max, v) and v̂ = v_max/(1−β2ᵗ).  t = 1 on the first applied step.
/// This is torch.optim.Adam's rule (ε added after the bias correction of √v). Keras applies ε before
/// it (w ← w − lr·√(1−β2ᵗ)/(1−β1ᵗ) · m/(√v + ε)); the two agree when ε ≪ √v̂. ε defaults to Keras's
/// 1e-7 (PyTorch: 1e-8). Elementwise math is float32, rounded as the formulas read (no FMA); the powers βᵗ
/// are double. From the avx2 level up, elements whose state has decayed near underflow (the subnormal m
/// and v of a weight whose gradient stays zero) are computed in double with the same bits, so that they
/// do not take the CPU's slow path for subnormal numbers every step.
/// Slots: "m", "v" and, with amsgrad, "v_max".
class Adam : public SlotOptimizer {
  public:
    struct Options {
        LearningRate learning_rate = 0.001f;
        double beta1 = 0.9;    ///< in [0, 1); a double, as the libraries take it, so that 1 − β is exact
        double beta2 = 0.999;  ///< in [0, 1)
        float epsilon = 1e-7f; ///< ≥ 0
        bool amsgrad = false;
        Clipping clip{};
    };
    /// Throws std::invalid_argument naming a bad option.
    explicit Adam(Options options);
    Adam(); ///< default options (a nested aggregate cannot be a default argument here)

    std::string kind() const override { return "adam"; }
    const Options& options() const { return options_; }

  protected:
    Adam(Options options, float weight_decay, const char* who); // who: "Adam" or "AdamW", for messages
    std::vector<std::string> slot_names() const override;
    void update(std::size_t index, std::span<float> weights, std::span<const float> grad, float lr,
                std::int64_t step) override;

  private:
    Options options_;
    float weight_decay_ = 0; // decoupled (AdamW); 0 for Adam
};

/// AdamW: first w ← w·(1 − lr·wd) (decoupled weight decay, scaled by the scheduled lr as in PyTorch
/// and Keras), then the Adam step above. wd defaults to Keras 3's 0.004 (PyTorch: 0.01).
class AdamW final : public Adam {
  public:
    struct Options {
        LearningRate learning_rate = 0.001f;
        double beta1 = 0.9;
        double beta2 = 0.999;
        float epsilon = 1e-7f;
        bool amsgrad = false;
        Clipping clip{};
        float weight_decay = 0.004f; ///< ≥ 0
    };
    /// Throws std::invalid_argument naming a bad option.
    explicit AdamW(Options options);
    AdamW(); ///< default options (a nested aggregate cannot be a default argument here)

    std::string kind() const override { return "adamw"; }
    const Options& options() const { return options_; } ///< hides Adam::options(), which lacks weight_decay

  private:
    Options options_;
};

} // namespace mixprec::optim
