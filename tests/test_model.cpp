// Models beyond a stack (a Model subclass with its own call() and train_step) and layer freezing: building,
// errors, gradients, training through fit with loss scaling, and resumption to the same bits.
#define BOOST_TEST_MODULE model
#include <boost/test/unit_test.hpp>

#include <mixprec/amp/loss_scale_optimizer.hpp>
#include <mixprec/autodiff/gradcheck.hpp>
#include <mixprec/autodiff/ops_elementwise.hpp>
#include <mixprec/autodiff/ops_shape.hpp>
#include <mixprec/models/layers/layers_core.hpp>
#include <mixprec/models/training/callbacks.hpp>
#include <mixprec/models/training/fit.hpp>
#include <mixprec/models/training/model_checkpoint.hpp>
#include <mixprec/optim/adam.hpp>

#include "blobs.hpp"
#include "op_checks.hpp"
#include "scratch_dir.hpp"

#include <algorithm>
#include <filesystem>
#include <memory>

using namespace mixprec;
using autodiff::Shape;
using autodiff::Tensor;
using op_checks::throws_with;
using test_data::blobs;

namespace {

/// dense → f(h + dense_1(h)) → dense_2: one residual block, f = relu or tanh.
class ResidualMlp : public models::Model {
  public:
    explicit ResidualMlp(std::string activation = "relu") : Model("residual_mlp"), activation_(std::move(activation)) {}

  private:
    std::string activation_; // before the layers: their initializers read it
    models::Dense& stem_ = track(models::Dense(16, activation_));
    models::Dense& inner_ = track(models::Dense(16));
    models::Dense& head_ = track(models::Dense(3));

    Tensor call(const Tensor& x, const models::CallContext& context) override {
        const Tensor h = stem_(x, context);
        const Tensor sum = h + inner_(h, context);
        return head_(activation_ == "tanh" ? autodiff::tanh(sum) : autodiff::relu(sum), context);
    }
};

/// Two branches of different widths, concatenated; the first branch's layer is called twice (shared weights).
class TwoBranches : public models::Model {
  public:
    TwoBranches() : Model("two_branches") {}

  private:
    models::Dense& left_ = track(models::Dense(8, "tanh"));
    models::Dense& square_ = track(models::Dense(8));
    models::Dense& right_ = track(models::Dense(4, "relu"));

    Tensor call(const Tensor& x, const models::CallContext& context) override {
        const Tensor a = square_(left_(x, context), context);
        return autodiff::concat({square_(a, context), right_(x, context)}, -1);
    }
};

/// Calls a layer it never tracked.
class Untracked : public models::Model {
  public:
    Untracked() : Model("untracked") {}

  private:
    models::Dense& tracked_ = track(models::Dense(4));
    models::Dense stray_{2};

    Tensor call(const Tensor& x, const models::CallContext& context) override {
        return stray_(tracked_(x, context), context);
    }
};

/// Tracks a layer call() never reaches.
class Unused : public models::Model {
  public:
    Unused() : Model("unused") {}

  private:
    models::Dense& used_ = track(models::Dense(4));
    models::Dense& spare_ = track(named(models::Dense(2, "relu"), "spare"));

    static models::Dense named(models::Dense layer, std::string name) {
        layer.set_name(std::move(name));
        return layer;
    }

    Tensor call(const Tensor& x, const models::CallContext& context) override { return used_(x, context); }
};

/// Calls its layer without passing the context on.
class DropsContext : public models::Model {
  public:
    DropsContext() : Model("drops_context") {}

  private:
    models::Dense& dense_ = track(models::Dense(4));

    Tensor call(const Tensor& x, const models::CallContext& /*context*/) override { return dense_(x); }
};

/// Counts the steps fit hands it, then trains as the default step does.
class CountingSteps : public ResidualMlp {
  public:
    int steps = 0;
    models::TrainStepResult train_step(const models::TrainStep& step) override {
        ++steps;
        return Model::train_step(step);
    }
};

std::shared_ptr<amp::LossScaleOptimizer> scaled_adam() {
    amp::LossScaleOptions scale;
    scale.initial_scale = 1024;
    scale.growth_interval = 5;
    return std::make_shared<amp::LossScaleOptimizer>(
        std::make_unique<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f}), scale);
}

struct PolicyGuard {
    explicit PolicyGuard(const char* name) { amp::set_global_policy(name); }
    ~PolicyGuard() { amp::set_global_policy("float32"); }
};

std::vector<std::vector<float>> masters(const std::vector<autodiff::Variable>& variables) {
    std::vector<std::vector<float>> out;
    for (const auto& v : variables) out.push_back(v.value().to_floats());
    return out;
}

/// A ResidualMlp built with `seed`, compiled with scaled_adam() and trained on `data` as `options` say.
ResidualMlp trained(std::uint64_t seed, const models::Dataset& data, const models::FitOptions& options) {
    ResidualMlp model;
    model.build(Shape{8}, seed);
    model.compile(scaled_adam());
    model.fit(data, options);
    return model;
}

/// A fresh ResidualMlp (other initial weights) and optimizer, loaded from the checkpoint at `path`.
ResidualMlp resumed_from(const std::filesystem::path& path) {
    ResidualMlp model;
    model.build(Shape{8}, 123);
    model.compile(scaled_adam());
    models::load_checkpoint(path, model, model.optimizer(), &model.training_state());
    return model;
}

void save(const std::filesystem::path& path, const models::Model& model) {
    models::save_checkpoint(path, model, model.optimizer(), &model.training_state());
}

} // namespace

BOOST_AUTO_TEST_CASE(a_subclassed_model_builds_its_layers_on_their_first_call) {
    ResidualMlp model;
    BOOST_TEST(!model.built());
    model.build(Shape{8}, 3);
    BOOST_TEST(model.built());
    BOOST_TEST(model.name() == "residual_mlp");
    BOOST_TEST(model.output_shape() == (Shape{3}));
    BOOST_REQUIRE(model.layers().size() == 3u);
    BOOST_TEST(model.layers()[1]->name() == "dense_1");
    BOOST_TEST(model.layers()[1]->input_shape() == (Shape{16}));
    BOOST_TEST(model.variables().size() == 6u);
    BOOST_TEST(model.variables()[2].name() == "dense_1/kernel");
    BOOST_TEST(model.count_params() == 8u * 16 + 16 + 16 * 16 + 16 + 16 * 3 + 3);
    const std::string summary = model.summary();
    BOOST_TEST(summary.find("Model: \"residual_mlp\"") != std::string::npos);
    BOOST_TEST(summary.find("dense_2 (Dense)") != std::string::npos);
    BOOST_TEST(summary.find("Total params: 467") != std::string::npos);

    ResidualMlp same;
    same.build(Shape{8}, 3);
    BOOST_TEST(models::weights_digest(same.variables()) == models::weights_digest(model.variables()));
    ResidualMlp other;
    other.build(Shape{8}, 4);
    BOOST_TEST(models::weights_digest(other.variables()) != models::weights_digest(model.variables()));

    BOOST_TEST(model(Tensor(Shape{5, 8})).shape() == (Shape{5, 3}));
    BOOST_TEST(&model.layer("dense_1") == model.layers()[1].get());
    BOOST_TEST((throws_with<std::invalid_argument>([&] { model.layer("conv2d"); },
                                                   {"no layer named 'conv2d'", "'dense', 'dense_1', 'dense_2'"})));
}

BOOST_AUTO_TEST_CASE(branches_concatenations_and_shared_layers_build) {
    TwoBranches model;
    model.build(Shape{5}, 1);
    BOOST_TEST(model.output_shape() == (Shape{12}));
    BOOST_TEST(model.layers()[1]->input_shape() == (Shape{8})); // square_, called on (8) twice
    BOOST_TEST(model.count_params() == 5u * 8 + 8 + 8 * 8 + 8 + 5 * 4 + 4);
    BOOST_TEST(model(Tensor(Shape{2, 5})).shape() == (Shape{2, 12}));
}

BOOST_AUTO_TEST_CASE(a_model_outputs_float32_under_a_mixed_policy) {
    PolicyGuard guard("mixed_float16");
    ResidualMlp model;
    model.build(Shape{8}, 1);
    BOOST_TEST(model.layers()[0]->policy().compute_dtype() == autodiff::Dtype::float16);
    BOOST_TEST(model(Tensor(Shape{2, 8})).dtype() == autodiff::Dtype::float32);
}

BOOST_AUTO_TEST_CASE(misuse_is_explained) {
    Untracked untracked;
    BOOST_TEST((throws_with<std::logic_error>([&] { untracked.build(Shape{3}); },
                                              {"an unnamed Dense layer", "not one of its layers", "track()"})));
    Unused unused;
    BOOST_TEST(
        (throws_with<std::logic_error>([&] { unused.build(Shape{3}); }, {"layer 'spare' (Dense)", "never called"})));
    DropsContext drops;
    BOOST_TEST((throws_with<std::logic_error>([&] { drops.build(Shape{3}); },
                                              {"layer 'dense' (Dense)", "pass its context on"})));
    ResidualMlp model;
    BOOST_TEST((throws_with<std::logic_error>([&] { model(Tensor(Shape{1, 8})); }, {"before it is built"})));
    BOOST_TEST((throws_with<std::logic_error>([&] { (void)model.summary(); }, {"build"})));
    model.build(Shape{8});
    BOOST_TEST((throws_with<std::logic_error>([&] { model.build(Shape{8}); }, {"already built"})));
    BOOST_TEST((throws_with<autodiff::shape_error>([&] { model(Tensor(Shape{2, 7})); }, {"(8)", "(2, 7)"})));
    BOOST_TEST((throws_with<std::logic_error>([&] { model.fit(blobs(8, 1), {}); }, {"compile"})));
}

BOOST_AUTO_TEST_CASE(the_residual_backward_matches_finite_differences) {
    ResidualMlp model("tanh"); // smooth: finite differences across a relu's kink would not be a derivative
    model.build(Shape{8}, 5);
    autodiff::Rng rng(11);
    std::vector<float> x(4 * 8);
    for (float& v : x) v = rng.uniform() * 2 - 1;
    const auto result = autodiff::gradcheck([&](const std::vector<Tensor>& in) { return model(in[0]); },
                                            {Tensor::from_floats(Shape{4, 8}, x)});
    BOOST_TEST(result.passed, result.worst);
}

BOOST_AUTO_TEST_CASE(fit_trains_a_residual_model_with_loss_scaling_and_resumes_to_the_same_bits) {
    PolicyGuard guard("mixed_float16");
    const models::TensorDataset train = blobs(512, 1), test = blobs(256, 2);
    const models::FitOptions options{.epochs = 4, .batch_size = 32, .seed = 9};

    ResidualMlp straight;
    straight.build(Shape{8}, 7);
    auto opt = scaled_adam();
    straight.compile(opt);
    const double before = straight.evaluate(test).loss;
    const auto history = straight.fit(train, options);
    BOOST_REQUIRE(history.size() == 4u);
    const models::Evaluation after = straight.evaluate(test);
    BOOST_TEST(after.loss < 0.5 * before);
    BOOST_TEST(after.accuracy > 0.9);
    BOOST_TEST(opt->current_loss_scale() > 1024.0f); // the scale grew: steps were taken in float16

    ScratchDir dir("test_model_resume");
    const auto path = dir.path / "residual.ckpt";
    save(path, trained(7, train, {.epochs = 2, .batch_size = 32, .seed = 9}));
    ResidualMlp resumed = resumed_from(path);
    resumed.fit(train, {.epochs = 2, .batch_size = 32, .seed = 9});
    BOOST_TEST(models::weights_digest(resumed.variables()) == models::weights_digest(straight.variables()));
    BOOST_TEST(resumed.optimizer().current_loss_scale() == opt->current_loss_scale());
    BOOST_TEST(resumed.training_state().step == straight.training_state().step);
}

BOOST_AUTO_TEST_CASE(fit_calls_an_overridden_train_step) {
    CountingSteps model;
    model.build(Shape{8}, 1);
    model.compile(std::make_shared<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f}));
    model.fit(blobs(100, 3), {.epochs = 2, .batch_size = 25});
    BOOST_TEST(model.steps == 8);
    BOOST_TEST(model.training_state().step == 8);
}

BOOST_AUTO_TEST_CASE(a_frozen_layer_leaves_the_trainable_variables_and_keeps_its_weights) {
    ResidualMlp model;
    model.build(Shape{8}, 2);
    models::Layer& stem = model.layer("dense");
    BOOST_TEST(stem.trainable());
    stem.set_trainable(false);
    BOOST_TEST(!stem.trainable());
    BOOST_TEST(model.trainable_variables().size() == 4u);
    BOOST_TEST(model.variables().size() == 6u);
    BOOST_TEST(model.summary().find("Non-trainable params: 144") != std::string::npos);

    auto opt = std::make_shared<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f});
    model.compile(opt);
    const auto start = masters(model.variables());
    model.fit(blobs(128, 4), {.epochs = 1, .batch_size = 32});
    auto now = masters(model.variables());
    BOOST_TEST((now[0] == start[0] && now[1] == start[1])); // the frozen stem: bit for bit
    BOOST_TEST((now[2] != start[2] && now[4] != start[4])); // the rest trained

    // Unfrozen, it trains again, and the optimizer's slots of the others carry on.
    stem.set_trainable(true);
    BOOST_TEST(model.trainable_variables().size() == 6u);
    model.fit(blobs(128, 4), {.epochs = 1, .batch_size = 32});
    BOOST_TEST((masters(model.variables())[0] != now[0]));
}

BOOST_AUTO_TEST_CASE(gradients_flow_through_a_frozen_layer_to_the_layers_before_it) {
    ResidualMlp model;
    model.build(Shape{8}, 2);
    model.layer("dense_2").set_trainable(false); // the head: everything else lies before it
    model.compile(std::make_shared<optim::Adam>(optim::Adam::Options{.learning_rate = 1e-2f}));
    const auto start = masters(model.variables());
    model.fit(blobs(128, 4), {.epochs = 1, .batch_size = 32});
    const auto now = masters(model.variables());
    BOOST_TEST((now[4] == start[4] && now[5] == start[5])); // the frozen head
    BOOST_TEST((now[0] != start[0] && now[2] != start[2])); // the stem and the block, through it
}

BOOST_AUTO_TEST_CASE(freezing_before_build_applies_to_the_variables_build_creates) {
    models::Sequential model{models::Dense(4, "relu"), models::Dense(2)};
    model.layers()[0]->set_trainable(false);
    model.build(Shape{3}, 1);
    BOOST_TEST(!model.layers()[0]->trainable());
    BOOST_TEST(model.trainable_variables().size() == 2u);
    BOOST_TEST(model.trainable_variables()[0].name() == "dense_1/kernel");
}

namespace {

/// Freezes a layer when an epoch begins (fine-tuning: train the head first, then everything, or the reverse).
class FreezeAt final : public models::Callback {
  public:
    FreezeAt(std::string layer, std::int64_t epoch) : layer_(std::move(layer)), epoch_(epoch) {}
    void on_epoch_begin(models::FitContext& context, std::int64_t epoch) override {
        if (epoch == epoch_) context.model.layer(layer_).set_trainable(false);
    }

  private:
    std::string layer_;
    std::int64_t epoch_;
};

} // namespace

BOOST_AUTO_TEST_CASE(a_run_that_froze_a_layer_resumes_frozen_to_the_same_bits) {
    PolicyGuard guard("mixed_float16");
    const models::TensorDataset train = blobs(256, 5);
    const auto freeze_stem_at_1 = [] { return std::make_shared<FreezeAt>("dense", 1); };
    // Straight: 3 epochs, the stem frozen from epoch 1 on.
    const ResidualMlp straight =
        trained(3, train, {.epochs = 3, .batch_size = 32, .seed = 2, .callbacks = {freeze_stem_at_1()}});
    BOOST_TEST(!straight.layer("dense").trainable());

    // Split: 2 epochs (frozen in the second), a checkpoint, then a fresh model resumes for 1 more.
    ScratchDir dir("test_model_frozen");
    const auto path = dir.path / "frozen.ckpt";
    save(path, trained(3, train, {.epochs = 2, .batch_size = 32, .seed = 2, .callbacks = {freeze_stem_at_1()}}));
    ResidualMlp resumed = resumed_from(path);
    BOOST_TEST(!resumed.layer("dense").trainable()); // restored from the checkpoint
    BOOST_TEST(resumed.trainable_variables().size() == 4u);
    resumed.fit(train, {.epochs = 1, .batch_size = 32, .seed = 2});
    BOOST_TEST(models::weights_digest(resumed.variables()) == models::weights_digest(straight.variables()));
}
