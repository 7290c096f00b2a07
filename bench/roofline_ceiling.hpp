#pragma once
// The libraries' ceiling of a training step (bench_roofline's ceiling/<model>/float32): the step's matrix
// products and convolutions alone, each on the fastest kernel the libraries mixprec links offer for its
// shape, found by timing every candidate once at setup. Its time is what a step would take if everything
// else in it (pooling, activations, the loss, the optimizer, the tape, conversions) cost nothing, so its
// share of the roof bounds the share any step built on these libraries can reach on this CPU.

#include <mixprec/mixprec.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mixprec::bench {

class LibraryCeiling {
  public:
    /// The products of `model` (built) on `batch` examples in float32, as flops() in bench_roofline.cpp counts
    /// them: each Dense layer's forward product, its weights' product and (below the first layer with
    /// variables) its input's; each Conv2D's forward, backward-weights and backward-data passes likewise.
    /// Matrix products take the fastest of OpenBLAS's sgemm, oneDNN's sgemm and oneDNN's matmul primitive;
    /// convolutions the fastest of oneDNN's implementations (reference ones excluded) on its own layouts or
    /// on NHWC. nullopt when the model has a layer with products of another kind (attention);
    /// std::runtime_error when oneDNN has nothing but its reference implementation for a convolution's pass.
    static std::optional<LibraryCeiling> of(const models::Sequential& model, std::size_t batch);

    /// Runs every product once on its chosen kernel.
    void run() const;
    /// What was chosen, product by product ("dense 1600→128 forward: openblas 0.47 ms; …").
    const std::string& choices() const { return choices_; }

  private:
    struct Pass {
        std::string what; ///< "conv2d 32→64 13×13 forward", "dense 1600→128 input"
        std::string kernel;
        double ms = 0; ///< at setup
        std::function<void()> run;
    };
    void add(Pass pass);

    std::vector<Pass> passes_;
    std::string choices_;
};

} // namespace mixprec::bench
