#pragma once
// The trainer's command line: every flag of mixprec-train, parsed and checked, in one struct.

#include <mixprec/mixprec.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace mixprec::train {

struct Options {
    std::string model = "mlp";
    std::string precision = "mixed_float16";
    std::string optimizer = "adam";
    std::optional<float> learning_rate; ///< default: 1e-3 for adam/adamw, 1e-2 for sgd
    float momentum = 0.9f;              ///< sgd
    std::int64_t epochs = 5;
    std::size_t batch_size = 128;
    std::uint64_t seed = 1;
    std::optional<std::string> fp8_recipe;            ///< mixed_float8: delayed (default) | current
    std::optional<std::string> fp8_gradient_scaling;  ///< mixed_float8: per_tensor (default) | loss_scale
    std::optional<std::string> fp8_gradient_rounding; ///< mixed_float8: nearest (default) | stochastic
    std::string loss_scale = "auto";                  ///< auto | dynamic | none | a fixed value
    std::string loss_scale_preset = "mixprec";
    std::optional<float> initial_scale;
    std::optional<std::int64_t> growth_interval;
    std::optional<std::int64_t> hysteresis;
    std::optional<float> min_scale;
    std::optional<float> max_scale;
    std::vector<amp::MinScaleStep> min_scale_schedule; ///< a floor that rises: STEP:SCALE,...
    std::optional<float> clip_norm;
    std::optional<float> clip_value;
    std::string lr_schedule = "constant"; ///< constant | cosine | exponential
    std::int64_t warmup_steps = 0;        ///< linear from 0 to learning_rate over this many optimizer steps
    std::optional<float> decay_rate;      ///< exponential: the factor per epoch (default 0.9)
    std::optional<float> weight_decay;    ///< adamw: decoupled (AdamW's default 0.004); sgd: L2 (default 0)
    std::int64_t accumulate_steps = 1;    ///< batches per optimizer step
    std::filesystem::path data = models::default_fashion_mnist_dir;
    std::vector<std::filesystem::path> train_data; ///< empty, or the examples' and the labels' .npy files
    std::vector<std::filesystem::path> test_data;  ///< the same, for evaluation
    std::filesystem::path predictions;             ///< .npy of the test set's logits, written at the end
    std::filesystem::path checkpoint;
    std::int64_t checkpoint_every = 0;
    std::filesystem::path resume;
    std::filesystem::path initial_weights; ///< safetensors file to start from
    std::filesystem::path export_weights;  ///< safetensors file written after training
    std::string export_dtype = "float32";
    std::filesystem::path log;
    std::filesystem::path plot;
    std::int64_t max_steps = 0;
    bool telemetry = false;           ///< rounding telemetry on step records of the log
    std::int64_t telemetry_every = 1; ///< on every this many steps
    int threads = 0;                  ///< 0: every core
    std::string conv_route;           ///< a ConvBackend's name; empty: MIXPREC_CONV_ROUTE's, else automatic
    std::string gemm;                 ///< a Float32Gemm's name; empty: MIXPREC_GEMM's, else automatic
    std::string choices;              ///< a choices file: read when it exists, written at the end
    std::vector<std::int64_t> inject_nonfinite;
    int inject_nonfinite_rank = -1; ///< data-parallel: the only rank whose gradients get the inf (-1: every rank)
    std::string gradient_transport = "float32"; ///< data-parallel: float32 | compute
    double bucket_mib = 25;                     ///< data-parallel: the all-reduce fusion buffer
    std::int64_t rank_digest_every = 1;         ///< data-parallel: steps between state digests (0: last only)
    bool quiet = false;

    /// The loss-scale settings the flags describe (options.dynamic false with scale 1 for "none").
    amp::LossScaleOptions loss_scale_options() const;
};

/// Parses argv. Returns the options, or the exit code when the program should end now (--help: 0, a bad
/// flag or an impossible combination: 2, with one message naming the flag on stderr).
std::variant<Options, int> parse_options(int argc, char** argv);

} // namespace mixprec::train
