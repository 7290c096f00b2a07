#include "options.hpp"

#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace mixprec::train {

namespace {

/// Thrown for a combination of flags that cannot work; CLI11 prints it as it prints its own errors.
CLI::ValidationError conflict(const std::string& flag, const std::string& why) {
    return CLI::ValidationError(flag, why);
}

/// Accepts a name the library's `named` accepts, and otherwise says what it says (the library lists its
/// names), so that the flag and its environment variable share one list.
template <class Named>
CLI::Validator named_by(Named named, const std::string& description) {
    return CLI::Validator(
        [named](std::string& value) -> std::string {
            try {
                named(value);
                return {};
            } catch (const std::invalid_argument& e) {
                return e.what();
            }
        },
        description);
}

std::string joined(const std::vector<std::string_view>& names) {
    std::string text;
    for (auto name : names) {
        if (!text.empty()) text += ", ";
        text += name;
    }
    return text;
}

/// A float flag that must be finite and in [low, high] (above low, not at it, unless `low_allowed`), checked
/// as the float it becomes: CLI11's PositiveNumber lets nan through, and 1e40 would become inf.
CLI::Validator finite(float low, bool low_allowed, float high, const std::string& wanted, const std::string& name) {
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            std::size_t used = 0;
            float value = 0;
            try {
                value = std::stof(text, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used != text.size() || !std::isfinite(value) || value < low || (value == low && !low_allowed) ||
                value > high)
                return "'" + text + "' is not " + wanted;
            return {};
        },
        name);
}

/// Comma-separated positive step numbers.
std::vector<std::int64_t> parse_steps(const std::string& list) {
    std::vector<std::int64_t> steps;
    std::stringstream in(list);
    std::string item;
    while (std::getline(in, item, ',')) {
        std::size_t used = 0;
        long long step = 0;
        try {
            step = std::stoll(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != item.size() || step < 1)
            throw conflict("--inject-nonfinite", "'" + item + "' is not a step number (steps count from 1)");
        steps.push_back(step);
    }
    return steps;
}

/// Comma-separated STEP:SCALE pairs (--min-scale-schedule), steps numbered from 1 as everywhere on the
/// command line: the floor holds for step STEP on, that is once STEP - 1 updates have been made. Their order
/// and values are checked by LossScale.
std::vector<amp::MinScaleStep> parse_schedule(const std::string& list) {
    std::vector<amp::MinScaleStep> schedule;
    std::stringstream in(list);
    std::string item;
    while (std::getline(in, item, ',')) {
        const std::size_t colon = item.find(':');
        std::size_t used_step = 0, used_scale = 0;
        amp::MinScaleStep e;
        try {
            if (colon != std::string::npos) {
                e.step = std::stoll(item.substr(0, colon), &used_step);
                e.scale = std::stof(item.substr(colon + 1), &used_scale);
            }
        } catch (const std::exception&) {
            used_step = used_scale = 0;
        }
        if (colon == std::string::npos || used_step != colon || used_scale != item.size() - colon - 1 ||
            used_scale == 0 || e.step < 1 || !std::isfinite(e.scale) || e.scale <= 0)
            throw conflict("--min-scale-schedule",
                           "'" + item + "' is not STEP:SCALE (a step ≥ 1 and a finite scale > 0)");
        --e.step;
        if (!schedule.empty() && e.step <= schedule.back().step)
            throw conflict("--min-scale-schedule", "'" + item + "' does not come after the step before it");
        schedule.push_back(e);
    }
    return schedule;
}

/// A flag for a setting the chosen rule does not have is refused, not silently ignored.
void check_rule_reads(const Options& o) {
    const amp::ScaleRule rule = amp::loss_scale_preset(o.loss_scale_preset).rule;
    const std::pair<bool, const char*> flags[] = {{o.hysteresis.has_value(), "hysteresis"},
                                                  {o.min_scale.has_value(), "min_scale"},
                                                  {o.max_scale.has_value(), "max_scale"}};
    for (const auto& [given, field] : flags) {
        if (!given || amp::rule_reads(rule, field)) continue;
        std::string flag = std::string("--") + field, rules;
        std::replace(flag.begin(), flag.end(), '_', '-');
        for (std::string_view name : amp::loss_scale_preset_names())
            if (amp::rule_reads(amp::loss_scale_preset(name).rule, field))
                rules += (rules.empty() ? "" : ", ") + std::string(name);
        throw conflict(flag, "the " + o.loss_scale_preset + " rule has no " + std::string(field) +
                                 ", so it would be ignored (rules that have one: " + rules + ")");
    }
}

void check(const Options& o, bool dynamic_flags_given) {
    if (o.fp8_recipe && o.precision != "mixed_float8")
        throw conflict("--fp8-recipe", "only --precision mixed_float8 has FP8 products to scale");
    if (o.fp8_gradient_scaling && o.precision != "mixed_float8")
        throw conflict("--fp8-gradient-scaling", "only --precision mixed_float8 scales FP8 gradients per tensor");
    if (o.fp8_gradient_rounding && o.precision != "mixed_float8")
        throw conflict("--fp8-gradient-rounding", "only --precision mixed_float8 casts gradients into FP8 per tensor");
    if (o.fp8_gradient_scaling == "loss_scale" && o.loss_scale != "dynamic")
        throw conflict("--fp8-gradient-scaling", "loss_scale leaves the e5m2 gradients to the loss scale: add "
                                                 "--loss-scale dynamic");
    if (o.loss_scale == "per_layer") {
        if (o.growth_interval || o.hysteresis || o.min_scale || o.max_scale || !o.min_scale_schedule.empty())
            throw conflict("--loss-scale",
                           "per_layer moves each layer's scale by its own rule: drop --growth-interval, "
                           "--hysteresis, --min-scale, --max-scale and --min-scale-schedule (--initial-scale sets "
                           "the loss's)");
        int exponent = 0;
        if (o.initial_scale && std::frexp(*o.initial_scale, &exponent) != 0.5f)
            throw conflict("--initial-scale", "per_layer scales are powers of two: give one (32768, 1024, ...)");
    } else if (o.loss_scale != "auto" && o.loss_scale != "dynamic" && o.loss_scale != "none") {
        std::size_t used = 0;
        float value = 0;
        try {
            value = std::stof(o.loss_scale, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != o.loss_scale.size() || !std::isfinite(value) || value <= 0)
            throw conflict("--loss-scale", "'" + o.loss_scale +
                                               "' is not dynamic, per_layer, none, auto or a positive "
                                               "number");
        if (dynamic_flags_given)
            throw conflict("--loss-scale", "a fixed scale does not move: drop --growth-interval, --hysteresis, "
                                           "--initial-scale, --min-scale, --max-scale and --min-scale-schedule");
    }
    if (o.loss_scale == "auto" && !o.min_scale_schedule.empty() && !amp::Policy(o.precision).needs_loss_scaling())
        throw conflict("--min-scale-schedule", o.precision +
                                                   " trains without loss scaling unless asked: add --loss-scale "
                                                   "dynamic");
    if (o.loss_scale == "none" && dynamic_flags_given)
        throw conflict("--loss-scale", "none turns loss scaling off: the dynamic-scale flags do not apply");
    if (o.checkpoint_every > 0 && o.checkpoint.empty())
        throw conflict("--checkpoint-every", "needs --checkpoint PATH to know where to save");
    if (!o.resume.empty() && !std::filesystem::exists(o.resume))
        throw conflict("--resume", "no checkpoint at " + o.resume.string());
    if (!o.plot.empty()) {
        const auto ext = o.plot.extension();
        if (ext != ".png" && ext != ".svg") throw conflict("--plot", o.plot.string() + " should end in .png or .svg");
    }
    if (o.telemetry && o.log.empty() && o.plot.empty())
        throw conflict("--telemetry", "goes into the log and the plot: give --log PATH or --plot PATH too");
    if (o.optimizer != "sgd" && o.momentum != 0.9f) throw conflict("--momentum", "applies to --optimizer sgd only");
    if (o.optimizer == "adam" && o.weight_decay)
        throw conflict("--weight-decay", "Adam has no weight decay: use --optimizer adamw (decoupled weight decay) "
                                         "or sgd (L2)");
    if (o.clip_value && o.clip_norm)
        throw conflict("--clip-value", "and --clip-norm both clip the gradients: give one (one kind of clipping at "
                                       "a time, as in Keras)");
    if (o.decay_rate && o.lr_schedule != "exponential")
        throw conflict("--decay-rate", "applies to --lr-schedule exponential only");
    if (o.epochs == 0 && (!o.checkpoint.empty() || !o.resume.empty() || !o.plot.empty()))
        throw conflict("--epochs", "0 trains nothing: --checkpoint, --resume and --plot need training");
    if (!o.test_data.empty() && o.train_data.empty())
        throw conflict("--test-data", "needs --train-data (without it, both splits are Fashion-MNIST's)");
    for (const auto& path : o.train_data)
        if (!std::filesystem::exists(path)) throw conflict("--train-data", "no file at " + path.string());
    for (const auto& path : o.test_data)
        if (!std::filesystem::exists(path)) throw conflict("--test-data", "no file at " + path.string());
    if (!o.predictions.empty() && o.predictions.extension() != ".npy")
        throw conflict("--predictions", o.predictions.string() + " should end in .npy");
    if (!o.predictions.empty() && !o.train_data.empty() && o.test_data.empty())
        throw conflict("--predictions", "needs a test set: add --test-data X.npy Y.npy");
    if (!o.initial_weights.empty() && !o.resume.empty())
        throw conflict("--initial-weights", "and --resume both set the weights: --resume continues a run, "
                                            "--initial-weights starts one");
    if (!o.initial_weights.empty() && !std::filesystem::exists(o.initial_weights))
        throw conflict("--initial-weights", "no file at " + o.initial_weights.string());
    if (o.export_dtype != "float32" && o.export_weights.empty())
        throw conflict("--export-dtype", "needs --export-weights PATH to know where to write");
    if (o.export_weights.extension() == ".npz" && o.export_dtype != "float32" && o.export_dtype != "float16")
        throw conflict("--export-dtype", "NumPy has no " + o.export_dtype + ": an .npz holds float32 or float16");
}

} // namespace

amp::LossScaleOptions Options::loss_scale_options() const {
    const amp::Policy policy(precision);
    amp::LossScaleOptions options = amp::loss_scale_preset(loss_scale_preset, policy.compute_dtype());
    const bool needs = policy.needs_loss_scaling();
    if (loss_scale == "none" || (loss_scale == "auto" && !needs)) {
        options.dynamic = false;
        options.initial_scale = 1.0f;
        return options;
    }
    if (loss_scale != "dynamic" && loss_scale != "auto" && loss_scale != "per_layer") {
        options.dynamic = false;
        options.initial_scale = std::stof(loss_scale);
        return options;
    }
    if (initial_scale) options.initial_scale = *initial_scale;
    if (growth_interval) options.growth_interval = *growth_interval;
    if (hysteresis) options.hysteresis = *hysteresis;
    if (min_scale) options.min_scale = *min_scale;
    if (max_scale) options.max_scale = *max_scale;
    options.min_scale_schedule = min_scale_schedule;
    return options;
}

std::variant<Options, int> parse_options(int argc, char** argv) {
    Options o;
    CLI::App app{"mixprec-train: trains a model on Fashion-MNIST (or arrays of your own) in mixed precision, with "
                 "dynamic loss scaling, checkpoints and resumption, and weights in and out as safetensors.",
                 "mixprec-train"};
    app.get_formatter()->column_width(34);
    std::vector<std::string> model_names, preset_names;
    for (auto n : models::model_names()) model_names.emplace_back(n);
    for (auto n : amp::loss_scale_preset_names()) preset_names.emplace_back(n);

    app.add_option("--model", o.model, "Model to train")->check(CLI::IsMember(model_names))->capture_default_str();
    app.add_option("--precision", o.precision, "Dtype policy")
        ->check(CLI::IsMember(
            {"float32", "mixed_float16", "mixed_bfloat16", "mixed_cbfloat16", "mixed_float8", "mixed_mxfp8"}))
        ->capture_default_str();
    app.add_option("--optimizer", o.optimizer, "Optimizer")
        ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
        ->capture_default_str();
    app.add_option("--learning-rate", o.learning_rate, "Learning rate (default 1e-3 for adam/adamw, 1e-2 for sgd)")
        ->check(finite(0, false, INFINITY, "a finite number > 0", "POSITIVE"));
    app.add_option("--momentum", o.momentum, "SGD momentum")->check(CLI::Range(0.0f, 0.999f))->capture_default_str();
    app.add_option("--epochs", o.epochs, "Epochs to train (0: none; evaluate, and export with --export-weights)")
        ->check(CLI::Range(std::int64_t{0}, std::int64_t{100000}))
        ->capture_default_str();
    app.add_option("--batch-size", o.batch_size, "Examples per batch (per step, unless --accumulate-steps)")
        ->check(CLI::Range(std::size_t{1}, std::size_t{60000}))
        ->capture_default_str();
    app.add_option("--seed", o.seed, "Seed of the initial weights, the shuffling and dropout")->capture_default_str();
    app.add_option("--fp8-recipe", o.fp8_recipe,
                   "How mixed_float8 scales each FP8 tensor: delayed (from the amax of the last 16 steps, as "
                   "Transformer Engine's DelayedScaling) or current (from the tensor's own amax)")
        ->check(CLI::IsMember({"delayed", "current"}));
    app.add_option("--fp8-gradient-scaling", o.fp8_gradient_scaling,
                   "How mixed_float8 places the e5m2 gradients: per_tensor (each scaled by the recipe) or loss_scale "
                   "(cast unscaled, placed by --loss-scale dynamic alone; see --min-scale-schedule)")
        ->check(CLI::IsMember({"per_tensor", "loss_scale"}));
    app.add_option("--fp8-gradient-rounding", o.fp8_gradient_rounding,
                   "How mixed_float8 rounds the e5m2 gradients: nearest (ties to even) or stochastic (up or down "
                   "with probabilities that make it unbiased; the random streams follow --seed and resume exactly)")
        ->check(CLI::IsMember({"nearest", "stochastic"}));
    app.add_option("--loss-scale", o.loss_scale,
                   "dynamic, per_layer (a scale per layer, from what each layer's gradients lose), none, a fixed "
                   "value, or auto (dynamic for float16 and cbfloat16, none otherwise)")
        ->capture_default_str();
    app.add_option("--loss-scale-preset", o.loss_scale_preset, "Rule and defaults of the dynamic scale")
        ->check(CLI::IsMember(preset_names))
        ->capture_default_str();
    app.add_option("--initial-scale", o.initial_scale, "Initial dynamic loss scale")
        ->check(finite(0, false, INFINITY, "a finite number > 0", "POSITIVE"));
    app.add_option("--growth-interval", o.growth_interval, "Finite steps between growths")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
    app.add_option("--hysteresis", o.hysteresis, "Overflows it takes to back off")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
    app.add_option("--min-scale", o.min_scale, "Smallest dynamic scale")
        ->check(finite(0, false, INFINITY, "a finite number > 0", "POSITIVE"));
    app.add_option("--max-scale", o.max_scale, "Largest dynamic scale")
        ->check(finite(0, false, INFINITY, "a finite number > 0", "POSITIVE"));
    std::string schedule;
    app.add_option("--min-scale-schedule", schedule,
                   "A floor under the dynamic scale that rises over training (enhanced loss scaling, for FP8 "
                   "gradients): STEP:SCALE,... keeps the scale >= SCALE from step STEP on");
    app.add_option("--clip-norm", o.clip_norm, "Clip gradients to this global L2 norm")
        ->check(finite(0, false, INFINITY, "a finite number > 0", "POSITIVE"));
    app.add_option("--clip-value", o.clip_value,
                   "Clip each gradient element to plus or minus this (not with --clip-norm)")
        ->check(finite(0, false, INFINITY, "a finite number > 0", "POSITIVE"));
    app.add_option("--weight-decay", o.weight_decay,
                   "Weight decay wd: decoupled with adamw (w -= lr*wd*w before the Adam step; default 0.004), L2 with "
                   "sgd (wd*w added to the gradient, PyTorch's rule; default 0); adam has none (use adamw)")
        ->check(finite(0, true, INFINITY, "a finite number >= 0", "NONNEGATIVE"));
    app.add_option("--lr-schedule", o.lr_schedule,
                   "Learning rate over the run's optimizer steps: constant, cosine (to 0 at the last step, after the "
                   "warmup) or exponential (times --decay-rate every epoch)")
        ->check(CLI::IsMember({"constant", "cosine", "exponential"}))
        ->capture_default_str();
    app.add_option("--warmup-steps", o.warmup_steps,
                   "Raise the learning rate linearly from 0 to --learning-rate over this many optimizer steps first")
        ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))
        ->capture_default_str();
    app.add_option("--decay-rate", o.decay_rate,
                   "--lr-schedule exponential: the factor the learning rate is multiplied by per epoch (default 0.9)")
        ->check(finite(0, false, 1, "a number in (0, 1]", "IN (0, 1]"));
    app.add_option("--accumulate-steps", o.accumulate_steps,
                   "Average the gradients of this many batches per optimizer step: --batch-size stays the "
                   "micro-batch size, so the effective batch is this many times --batch-size")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
        ->capture_default_str();
    app.add_option("--data", o.data, "Directory of the Fashion-MNIST gzip IDX files")->capture_default_str();
    app.add_option("--train-data", o.train_data,
                   "Train on your own arrays instead of Fashion-MNIST: examples .npy ((n, 28, 28) or (n, 1, 28, 28), "
                   "uint8 or float32) and labels .npy ((n,), integers 0-9)")
        ->expected(2);
    app.add_option("--test-data", o.test_data, "Evaluate on these arrays (as --train-data) after every epoch")
        ->expected(2);
    app.add_option("--predictions", o.predictions,
                   "Write the test set's logits here at the end (.npy, float32, (examples, 10))");
    app.add_option("--checkpoint", o.checkpoint, "Save checkpoints here (every --checkpoint-every steps, each epoch)");
    app.add_option("--checkpoint-every", o.checkpoint_every, "Steps between checkpoints (0: epoch ends only)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--resume", o.resume, "Continue the run saved in this checkpoint");
    app.add_option("--initial-weights", o.initial_weights,
                   "Start from these weights (safetensors, or .npz: a tensor per variable, named as --export-weights "
                   "names them)");
    app.add_option("--export-weights", o.export_weights,
                   "Write the trained weights here (safetensors; NumPy's .npz for a path ending in .npz)");
    app.add_option("--export-dtype", o.export_dtype, "Dtype of the exported weights")
        ->check(CLI::IsMember({"float32", "float16", "bfloat16", "float8_e4m3", "float8_e5m2"}))
        ->capture_default_str();
    app.add_option("--log", o.log, "Write a JSON-lines log here");
    CLI::Option* telemetry =
        app.add_flag("--telemetry", o.telemetry,
                     "Count what rounding does to every gradient and layer (underflow, subnormal, overflow, amax) and "
                     "add it to the --log step records");
    app.add_option("--telemetry-every", o.telemetry_every, "Steps between telemetry records (with --telemetry)")
        ->check(CLI::PositiveNumber)
        ->needs(telemetry)
        ->capture_default_str();
    app.add_option("--plot", o.plot, "Draw loss, accuracy, loss scale and skipped steps here (.png or .svg)");
    app.add_option("--max-steps", o.max_steps,
                   "Stop after this many steps in all (optimizer steps, of --accumulate-steps batches; 0: no limit)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--threads", o.threads,
                   "Threads (0: every core other processes leave free, measured as training runs)")
        ->check(CLI::Range(0, 1024));
    app.add_option("--conv-route", o.conv_route,
                   "How convolutions run: automatic (a fixed rule: oneDNN's primitives from avx2 up, im2col below), "
                   "im2col, im2col_onednn, onednn, or measured (each timed on this CPU at its first use and the "
                   "fastest kept, so the bits rest on the timings). Default: MIXPREC_CONV_ROUTE, else automatic")
        ->check(named_by(autodiff::conv_backend_named, "ROUTE"));
    app.add_option("--gemm", o.gemm,
                   "The library of float32 matrix products: automatic (a fixed rule: oneDNN's matmul primitive from "
                   "avx512 up for products of one matrix, OpenBLAS's sgemm for batches of products and below "
                   "avx512), openblas "
                   "(its kernels follow the CPU model only), onednn (its kernels follow MIXPREC_ISA too), or "
                   "measured (both timed at each shape's first product and the faster kept, so the bits rest on the "
                   "timings). Default: MIXPREC_GEMM, else automatic")
        ->check(named_by(autodiff::float32_gemm_named, "LIBRARY"));
    app.add_option("--choices", o.choices,
                   "A file of the measured modes' choices: read when it exists (its choices are taken without "
                   "timing, so a run repeats another's bits), and written at the end with every choice made");
    std::string inject;
    app.add_option("--inject-nonfinite", inject, "Comma-separated steps whose gradients get an inf, to test skipping");
    CLI::Option* inject_rank =
        app.add_option(
               "--inject-nonfinite-rank", o.inject_nonfinite_rank,
               "Under mpirun: only this rank's gradients get the inf of --inject-nonfinite (default: every rank)")
            ->check(CLI::Range(0, 1 << 20));
    app.add_option("--gradient-transport", o.gradient_transport,
                   "Under mpirun: gradients are summed across ranks in float32, or in the compute dtype as the "
                   "backward pass rounded them (half the bytes for 16-bit formats, a rounding per addition)")
        ->check(CLI::IsMember({"float32", "compute"}))
        ->capture_default_str();
    app.add_option("--bucket-mib", o.bucket_mib,
                   "Under mpirun: gradients are summed in all-reduces of at most this many MiB each")
        ->check(finite(0.001, true, 1 << 20, "a number of MiB in [0.001, 1048576]", "IN [0.001, 1048576]"))
        ->capture_default_str();
    app.add_option("--rank-digest-every", o.rank_digest_every,
                   "Under mpirun: log every rank's state digest every this many steps, to show that they agree "
                   "(0: after the last step only; a digest reads the whole state once)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    app.add_flag("--quiet", o.quiet, "No progress bar");

    try {
        app.parse(argc, argv);
        if (!inject.empty()) o.inject_nonfinite = parse_steps(inject);
        if (inject_rank->count() > 0 && inject.empty())
            throw conflict("--inject-nonfinite-rank", "needs --inject-nonfinite (the steps to inject at)");
        if (!schedule.empty()) o.min_scale_schedule = parse_schedule(schedule);
        const bool dynamic_flags = o.initial_scale || o.growth_interval || o.hysteresis || o.min_scale || o.max_scale ||
                                   !o.min_scale_schedule.empty();
        check(o, dynamic_flags);
        if (o.min_scale && o.max_scale && *o.min_scale > *o.max_scale)
            throw conflict("--min-scale", "is larger than --max-scale");
        check_rule_reads(o);
        amp::LossScale validated(o.loss_scale_options()); // rejects bad values now, naming the option
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e); // prints the message (or the help)
        return code == 0 ? 0 : 2;
    } catch (const std::invalid_argument& e) {
        std::cerr << "mixprec-train: " << e.what() << '\n';
        return 2;
    }
    if (!o.learning_rate) o.learning_rate = o.optimizer == "sgd" ? 1e-2f : 1e-3f;
    if (o.lr_schedule == "exponential" && !o.decay_rate) o.decay_rate = 0.9f;
    return o;
}

} // namespace mixprec::train
