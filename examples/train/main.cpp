// mixprec-train: trains a built-in model on Fashion-MNIST (or arrays of your own) in the precision asked
// for, with a progress bar, a JSON-lines log, a plot, checkpoints and resumption, and takes weights in and
// out as safetensors. `mixprec-train --help` lists the flags.
//
// Exit codes: 0 when training ran to its end, 1 when it could not (missing data, unusable checkpoint,
// the loss became NaN), 2 for bad flags.

#include "options.hpp"
#include "plot.hpp"
#include "schedule.hpp"
#include "telemetry_plot.hpp"

#include <mixprec/mixprec.hpp>

#if MIXPREC_HAVE_MPI
#include <mixprec/models/dist/mpi_communicator.hpp>
#endif

#include <malloc.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <thread>

using namespace mixprec;

namespace {

/// Keeps what the plots show.
class PlotRecorder final : public models::Callback {
  public:
    void on_step_end(models::FitContext& context, const models::StepLogs& logs) override {
        // The plot shows the scale after each step (the log has the one each step used).
        steps.push_back({logs.step, logs.loss, context.optimizer.current_loss_scale(), logs.skipped});
        if (logs.telemetry) {
            telemetry.push_back({logs.step, logs.loss_scale, logs.telemetry});
            if (++with_histograms_ > max_histograms) thin();
        }
    }
    void on_epoch_end(models::FitContext&, const models::EpochLogs& logs) override {
        if (logs.validation_accuracy) epochs.push_back({logs.last_step, *logs.validation_accuracy});
    }
    std::vector<train::StepPoint> steps;
    std::vector<train::EpochPoint> epochs;
    std::vector<train::TelemetryPoint> telemetry;

  private:
    /// Histograms (2 KiB per entry) are kept for at most this many steps, spread over the run: the figure
    /// draws three of them; the underflow shares need only the counts.
    static constexpr std::size_t max_histograms = 64;

    /// Drops the histograms of every other step that has them (never the latest).
    void thin() {
        bool drop = false;
        for (std::size_t i = 0; i + 1 < telemetry.size(); ++i) {
            const auto& entries = telemetry[i].telemetry->entries();
            if (entries.empty() || entries.front().second.exponent_histogram.empty()) continue;
            if ((drop = !drop)) {
                amp::Telemetry counts;
                for (auto [name, stats] : entries) {
                    stats.exponent_histogram.clear();
                    counts.add(name, stats);
                }
                telemetry[i].telemetry = std::make_shared<const amp::Telemetry>(std::move(counts));
                --with_histograms_;
            }
        }
    }
    std::size_t with_histograms_ = 0;
};

/// Where the telemetry figure goes beside the run's plot: run.png → run_telemetry.png.
std::filesystem::path telemetry_plot_path(const std::filesystem::path& plot) {
    std::filesystem::path path = plot;
    path.replace_filename(plot.stem().string() + "_telemetry" + plot.extension().string());
    return path;
}

/// Sets one gradient element to +inf at the steps asked for, so that the loss scaler has to skip them; under
/// mpirun, on one rank only if asked.
class NonfiniteInjector {
  public:
    NonfiniteInjector(std::vector<std::int64_t> steps, bool here) : steps_(std::move(steps)), here_(here) {}
    void operator()(std::int64_t step, std::vector<autodiff::Tensor>& grads) const {
        if (!here_ || grads.empty() || std::find(steps_.begin(), steps_.end(), step) == steps_.end()) return;
        autodiff::Tensor& g = grads.front();
        std::vector<float> values = g.to_floats();
        values[0] = INFINITY;
        g = autodiff::Tensor::from_floats(g.shape(), values, g.dtype());
    }

  private:
    std::vector<std::int64_t> steps_;
    bool here_;
};

/// The processes of the run: the MPI job's ranks when mpirun started this one, else this process alone.
struct World {
    std::shared_ptr<optim::Communicator> communicator = std::make_shared<optim::SingleProcess>();
    int rank() const { return communicator->rank(); }
    int size() const { return communicator->size(); }
    bool root() const { return rank() == 0; }
    int local_size = 1; ///< ranks on this host
    /// Ends the whole job after an error on this rank (others would wait for it in a collective).
    std::function<void(int)> abort = [](int) {};
};

World make_world() {
    World world;
#if MIXPREC_HAVE_MPI
    if (models::MpiCommunicator::launched()) {
        auto mpi = std::make_shared<models::MpiCommunicator>();
        world.local_size = mpi->local_size();
        world.abort = [mpi](int code) { mpi->abort(code); };
        world.communicator = std::move(mpi);
    }
#else
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
        if (const char* ranks = std::getenv(name); ranks && std::atoi(ranks) > 1)
            throw std::runtime_error(std::string("this mixprec-train was built without MPI, so each of the ") + ranks +
                                     " processes mpirun started would train alone: build it where CMake finds an "
                                     "MPI (Debian: libopenmpi-dev)");
#endif
    return world;
}

/// The CPUs this process may run on.
int cpus_available() {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

std::unique_ptr<amp::LossScaleOptimizer> make_optimizer(const train::Options& o, const optim::LearningRate& lr) {
    optim::Clipping clip;
    if (o.clip_norm) clip.global_clipnorm = *o.clip_norm;
    if (o.clip_value) clip.clipvalue = *o.clip_value;
    std::unique_ptr<optim::Optimizer> inner;
    if (o.optimizer == "sgd")
        inner =
            std::make_unique<optim::SGD>(optim::SGD::Options{lr, o.momentum, false, o.weight_decay.value_or(0), clip});
    else if (o.optimizer == "adamw") {
        optim::AdamW::Options options;
        options.learning_rate = lr;
        options.clip = clip;
        if (o.weight_decay) options.weight_decay = *o.weight_decay;
        inner = std::make_unique<optim::AdamW>(options);
    } else {
        optim::Adam::Options options;
        options.learning_rate = lr;
        options.clip = clip;
        inner = std::make_unique<optim::Adam>(options);
    }
    // Always a LossScaleOptimizer: with scaling off (a fixed scale of 1) it applies exactly what the inner
    // optimizer would, and it still skips a step whose gradients are not finite.
    auto optimizer = o.loss_scale == "per_layer"
                         ? std::make_unique<amp::LossScaleOptimizer>(std::move(inner), o.loss_scale_options(),
                                                                     amp::LayerScaleOptions{})
                         : std::make_unique<amp::LossScaleOptimizer>(std::move(inner), o.loss_scale_options());
    if (amp::Policy(o.precision).fp8_products())
        optimizer->scale_fp8({.recipe = o.fp8_recipe.value_or("delayed") == "current" ? amp::Fp8Recipe::current
                                                                                      : amp::Fp8Recipe::delayed,
                              .scale_gradients = o.fp8_gradient_scaling.value_or("per_tensor") == "per_tensor",
                              .stochastic_gradients = o.fp8_gradient_rounding == "stochastic",
                              .seed = o.seed});
    return optimizer;
}

/// The header line's words on the optimizer beyond its kind and learning rate: the schedule and the weight
/// decay ("" for the defaults, so that the default run's line is unchanged).
std::string describe_optimizer(const train::Options& o, const train::RunLength& length) {
    std::string text = train::describe_schedule(o, length);
    const float decay = o.optimizer == "adamw" ? o.weight_decay.value_or(optim::AdamW::Options{}.weight_decay)
                                               : o.weight_decay.value_or(0);
    char number[96];
    std::snprintf(number, sizeof number, ", %s weight decay %g", o.optimizer == "sgd" ? "L2" : "decoupled",
                  double(decay));
    return decay > 0 ? text + number : text;
}

/// ", clip value 1" or ", global clip norm 1" ("" without clipping).
std::string describe_clipping(const train::Options& o) {
    if (!o.clip_norm && !o.clip_value) return "";
    char text[64];
    std::snprintf(text, sizeof text, o.clip_norm ? ", global clip norm %g" : ", clip value %g",
                  double(o.clip_norm ? *o.clip_norm : *o.clip_value));
    return text;
}

std::string describe_scaling(const amp::LossScaleOptions& s) {
    char text[160];
    if (!s.dynamic)
        std::snprintf(text, sizeof text, s.initial_scale == 1.0f ? "off" : "fixed at %g", double(s.initial_scale));
    else
        std::snprintf(text, sizeof text, "dynamic (%s rule, initial %g, growth every %lld steps%s)",
                      std::string(amp::name_of(s.rule)).c_str(), double(s.initial_scale),
                      static_cast<long long>(s.growth_interval),
                      s.min_scale_schedule.empty() ? "" : ", a floor that rises");
    return text;
}

void print_summary(const models::RunSummary& s, bool completed) {
    std::printf("\n%s after %lld steps: test accuracy %s, %lld skipped steps, loss scale %g\n",
                completed ? "Finished" : "Stopped", static_cast<long long>(s.steps),
                s.test_accuracy ? (std::to_string(*s.test_accuracy * 100).substr(0, 5) + "%").c_str() : "not measured",
                static_cast<long long>(s.skipped_steps), double(s.loss_scale));
    std::printf("%.0f samples/s (training), peak RSS %.0f MiB, weights digest %s (%s kernels)\n", s.samples_per_second,
                s.peak_rss_mib, s.weights_digest.c_str(), s.isa.c_str());
    if (!s.rank_digests.empty()) {
        const bool equal = std::equal(s.rank_digests.begin() + 1, s.rank_digests.end(), s.rank_digests.begin());
        std::printf("State digests of the %zu ranks after the last step: %s (", s.rank_digests.size(),
                    equal ? "equal" : "DIFFERENT");
        for (std::size_t i = 0; i < s.rank_digests.size(); ++i)
            std::printf("%s%016llx", i ? ", " : "", static_cast<unsigned long long>(s.rank_digests[i]));
        std::printf(")\n");
    }
}

/// The training and test sets: Fashion-MNIST's, or the arrays of --train-data and --test-data (whose
/// examples are viewed as the (1, 28, 28) images the built-in models take).
struct Data {
    std::unique_ptr<models::Dataset> train;
    std::unique_ptr<models::Dataset> test; ///< none for arrays without --test-data
};

Data load_data(const train::Options& o) {
    Data data;
    if (o.train_data.empty()) {
        data.train = std::make_unique<models::FashionMnist>(models::FashionMnist::load(o.data, models::Split::train));
        data.test = std::make_unique<models::FashionMnist>(models::FashionMnist::load(o.data, models::Split::test));
        return data;
    }
    const autodiff::Shape image{1, 28, 28};
    const std::size_t classes = models::FashionMnist::num_classes;
    data.train = std::make_unique<models::ArrayDataset>(
        models::load_array_dataset(o.train_data[0], o.train_data[1], classes, image));
    std::printf("Training on %zu examples from %s\n", data.train->size(), o.train_data[0].c_str());
    if (!o.test_data.empty()) {
        data.test = std::make_unique<models::ArrayDataset>(
            models::load_array_dataset(o.test_data[0], o.test_data[1], classes, image));
        std::printf("Testing on %zu examples from %s\n", data.test->size(), o.test_data[0].c_str());
    }
    return data;
}

/// --export-weights and --predictions, once training is over.
void write_outputs(const train::Options& o, models::Sequential& model, const Data& data) {
    if (!o.export_weights.empty()) {
        models::save_weights(o.export_weights, model.variables(),
                             {.dtype = autodiff::parse_dtype(o.export_dtype),
                              .metadata = {{"model", o.model}, {"precision", o.precision}}});
        std::printf("Weights (%s) written to %s\n", o.export_dtype.c_str(), o.export_weights.c_str());
    }
    if (!o.predictions.empty()) {
        const autodiff::Tensor logits = models::predict(model, *data.test);
        models::write_npy(o.predictions, models::from_tensor(logits));
        std::printf("Predictions %s written to %s\n", logits.shape().to_string().c_str(), o.predictions.c_str());
    }
}

int run(const train::Options& o, const World& world) {
    if (world.size() > 1 && o.inject_nonfinite_rank >= world.size()) {
        if (world.root())
            std::cerr << "mixprec-train: --inject-nonfinite-rank " << o.inject_nonfinite_rank << ": the run has "
                      << world.size() << " ranks (0 to " << world.size() - 1 << ")\n";
        return 2;
    }
    if (o.threads > 0) autodiff::set_blas_threads(o.threads);
    if (!o.conv_route.empty()) autodiff::set_conv_backend(autodiff::conv_backend_named(o.conv_route));
    if (!o.gemm.empty()) autodiff::set_float32_gemm(autodiff::float32_gemm_named(o.gemm));
    // Ranks sharing a host share its cores (mpirun binds each of a few ranks to its own core already).
    if (o.threads == 0 && world.local_size > 1)
        autodiff::set_blas_threads(
            std::max(1, std::min(cpus_available(), int(std::thread::hardware_concurrency()) / world.local_size)));
    amp::set_global_policy(o.precision);

    if (!o.choices.empty()) {
        const std::filesystem::path folder = std::filesystem::path(o.choices).parent_path();
        if (!folder.empty() && !std::filesystem::is_directory(folder)) {
            std::cerr << "mixprec-train: --choices " << o.choices << ": no folder " << folder.string() << '\n';
            return 2;
        }
        if (std::filesystem::exists(o.choices)) // before --resume's choices, which take their place
            autodiff::adopt_measured_choices(models::read_choices_file(o.choices));
    }
    const Data data = load_data(o);
    const models::Dataset& train_data = *data.train;

    models::Sequential model = models::make_model(o.model);
    model.build(train_data.example_shape(), o.seed);
    // The schedule comes from the flags and the dataset's size only, so a resumed run recomputes it exactly.
    const train::RunLength length = train::run_length(o, train_data.size());
    if (const auto problem = train::schedule_problem(o, length)) {
        std::cerr << "mixprec-train: " << *problem << '\n';
        return 2;
    }
    auto optimizer = make_optimizer(o, train::learning_rate(o, length));
    if (world.size() > 1)
        optimizer->set_communicator(world.communicator,
                                    {.transport = amp::parse_gradient_transport(o.gradient_transport),
                                     .bucket_bytes = static_cast<std::size_t>(o.bucket_mib * (1 << 20))});
    models::TrainingState& state = model.training_state();
    if (!o.initial_weights.empty()) {
        models::load_weights(o.initial_weights, model.variables());
        std::printf("Starting from the weights in %s\n", o.initial_weights.c_str());
    }
    if (!o.resume.empty()) {
        models::load_checkpoint(o.resume, model, *optimizer, &state);
        std::printf("Resuming %s at step %lld (epoch %lld, batch %lld)\n", o.resume.c_str(),
                    static_cast<long long>(state.step), static_cast<long long>(state.epoch + 1),
                    static_cast<long long>(state.batch_in_epoch));
    }
    if (!o.quiet) std::cout << model.summary() << '\n';
    const std::string batch =
        std::to_string(o.batch_size) +
        (o.accumulate_steps > 1 ? " × " + std::to_string(o.accumulate_steps) + " accumulated" : "");
    std::printf("mixprec-train: %s, %s, %s (lr %g%s)%s, batch %s, %lld epochs, loss scaling %s\n", o.model.c_str(),
                o.precision.c_str(), o.optimizer.c_str(), double(*o.learning_rate),
                describe_optimizer(o, length).c_str(), describe_clipping(o).c_str(), batch.c_str(),
                static_cast<long long>(o.epochs),
                o.loss_scale == "per_layer"
                    ? ("per layer (initial " + std::to_string(int(o.loss_scale_options().initial_scale)) + ")").c_str()
                    : describe_scaling(o.loss_scale_options()).c_str());
    if (world.size() > 1)
        std::printf("Data-parallel over %d ranks: each computes 1/%d of every batch; gradients summed in %s, in "
                    "all-reduces of at most %g MiB\n",
                    world.size(), world.size(), o.gradient_transport.c_str(), o.bucket_mib);
    std::fflush(stdout);

    models::ProgressBar progress(std::cout, o.quiet ? std::optional<bool>(false) : std::nullopt);
    models::LossScaleMonitor monitor(std::cout, 200, 0.05);
    std::ostream quiet_stream(nullptr); // what a rank other than 0 says goes nowhere
    models::TerminateOnNaN terminate(world.root() ? std::cerr : quiet_stream);
    PlotRecorder recorder;
    std::optional<models::ModelCheckpoint> checkpoint;
    // The logger also measures the run's summary, so there is one even without --log (it then writes nothing).
    // Rank 0 alone writes the log, checkpoints, plots and weights.
    models::JsonLinesLogger logger(world.root() ? o.log : std::filesystem::path(), !o.resume.empty());
    std::optional<models::ShareCores> share_cores; // without --threads: the cores other processes leave free
    if (o.threads == 0 && world.size() == 1) share_cores.emplace();
    // --epochs counts from the run's start, also when it resumes (as the schedule's length does).
    models::FitOptions fit{.epochs = o.epochs,
                           .initial_epoch = state.epoch,
                           .batch_size = o.batch_size,
                           .seed = o.seed,
                           .max_steps = o.max_steps,
                           .accumulate_steps = o.accumulate_steps,
                           .validation = data.test.get(),
                           .telemetry_every = o.telemetry ? o.telemetry_every : 0,
                           .telemetry_histogram = o.telemetry && !o.plot.empty(),
                           .rank_digest_every = o.rank_digest_every};
    if (!o.quiet) fit.callbacks.push_back(&progress);
    fit.callbacks.push_back(&terminate);
    if (share_cores) fit.callbacks.push_back(&*share_cores);
    fit.callbacks.push_back(&logger);
    if (!o.checkpoint.empty() && world.root())
        fit.callbacks.push_back(&checkpoint.emplace(o.checkpoint, o.checkpoint_every));
    if (!o.plot.empty() && world.root()) fit.callbacks.push_back(&recorder);
    if (o.precision != "float32" && !o.quiet) fit.callbacks.push_back(&monitor);
    if (!o.inject_nonfinite.empty())
        fit.gradient_hook = NonfiniteInjector(o.inject_nonfinite,
                                              o.inject_nonfinite_rank < 0 || o.inject_nonfinite_rank == world.rank());

    if (o.epochs == 0) { // nothing to train: evaluate the weights as they are
        if (data.test) {
            const models::Evaluation e = models::evaluate(model, *data.test);
            std::printf("No training (--epochs 0): test loss %.4f, test accuracy %.2f%%\n", e.loss, e.accuracy * 100);
        }
        if (world.root()) write_outputs(o, model, data);
        return 0;
    }
    models::fit(model, *optimizer, train_data, state, fit);
    const bool completed = state.epoch >= o.epochs || (o.max_steps > 0 && state.step >= o.max_steps);

    if (!o.plot.empty() && world.root()) {
        std::string title = o.model + ", " + o.precision + ", " + o.optimizer;
        train::write_plot(o.plot, recorder.steps, recorder.epochs, title);
        std::printf("Plot written to %s\n", o.plot.c_str());
        if (!recorder.telemetry.empty()) {
            const auto path = telemetry_plot_path(o.plot);
            train::write_telemetry_plot(path, recorder.telemetry, amp::Policy(o.precision).compute_dtype(), title);
            std::printf("Telemetry plot written to %s\n", path.c_str());
        }
    }
    if (world.root()) write_outputs(o, model, data);
    print_summary(logger.summary(), completed && !terminate.terminated());
    const std::vector<std::string> chosen = autodiff::measured_choices();
    if (!chosen.empty() && !o.quiet) {
        std::printf("Chosen by measurement on this CPU (or adopted):\n");
        for (const std::string& line : chosen) std::printf("  %s\n", line.c_str());
    }
    if (!o.choices.empty() && world.root()) {
        const std::vector<autodiff::MeasuredChoice> kept = autodiff::measured_choice_list();
        models::write_choices_file(o.choices, kept);
        std::printf("Measured choices (%zu) written to %s\n", kept.size(), o.choices.c_str());
    }
    return terminate.terminated() ? 1 : 0;
}

} // namespace

int main(int argc, char** argv) {
    // Training allocates and frees the same large activation buffers every step. By default glibc serves
    // each from fresh mmap'd pages (and trims the heap after it), so every step pays page faults for
    // memory it just released; keeping freed memory in the heap removes them.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    World world;
    try {
        world = make_world();
    } catch (const std::exception& e) {
        std::cerr << "mixprec-train: " << e.what() << '\n';
        return 1;
    }
    // Under mpirun every rank runs this program; rank 0 alone speaks (errors excepted) and writes files.
    std::streambuf* cerr_buffer = std::cerr.rdbuf();
    if (!world.root()) {
        if (!std::freopen("/dev/null", "w", stdout)) return 1;
        std::cerr.rdbuf(nullptr); // flag errors are rank 0's to report; every rank exits with its code
    }
    const auto parsed = train::parse_options(argc, argv);
    std::cerr.rdbuf(cerr_buffer);
    if (const int* code = std::get_if<int>(&parsed)) return *code;
    try {
        autodiff::isa();          // a bad MIXPREC_ISA is a usage error, reported before any work
        autodiff::conv_backend(); // and so are a bad MIXPREC_CONV_ROUTE, MIXPREC_GEMM and
        autodiff::float32_gemm(); // MIXPREC_NEAR_UNDERFLOW
        optim::near_underflow();
    } catch (const autodiff::isa_error& e) {
        std::cerr << "mixprec-train: " << e.what() << '\n';
        return 2;
    } catch (const std::invalid_argument& e) {
        std::cerr << "mixprec-train: " << e.what() << '\n';
        return 2;
    }
    try {
        return run(std::get<train::Options>(parsed), world);
    } catch (const std::exception& e) {
        if (world.size() == 1) {
            std::cerr << "mixprec-train: " << e.what() << '\n';
            return 1;
        }
        std::cerr << "mixprec-train: rank " << world.rank() << " of " << world.size() << ": " << e.what()
                  << " (ending every rank)\n";
        world.abort(1);
        return 1;
    }
}
