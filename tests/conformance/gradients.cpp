// One training step's loss and gradients, for gradient_oracle.py to compare with PyTorch's: builds a
// built-in model as mixprec-train does (models::make_model, built for (1, 28, 28) examples with the seed),
// draws a batch from a generator seeded with the same seed, and takes the gradient of the mean sparse
// categorical cross-entropy of the logits, as train_step does but without loss scaling. Writes one
// safetensors file holding, all in float32:
//   <variable name>        every variable's master
//   __input__ (B, 1, 28, 28), __labels__ (B)    the batch (images uniform in [0, 1), labels in 0..9)
//   __loss__ ()            the batch's mean loss
//   grad/<variable name>   every gradient, widened exactly from the compute dtype
//
//   conformance_gradients --model vit --precision mixed_float16 --seed 1 --batch 32 --out vit.safetensors

#include <mixprec/amp/policy.hpp>
#include <mixprec/autodiff/ops_loss.hpp>
#include <mixprec/autodiff/tape.hpp>
#include <mixprec/autodiff/tensor/isa.hpp>
#include <mixprec/autodiff/tensor/rng.hpp>
#include <mixprec/models/io/safetensors.hpp>
#include <mixprec/models/training/zoo.hpp>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

namespace ad = mixprec::autodiff;
namespace models = mixprec::models;

struct Options {
    std::string model = "mlp";
    std::string precision = "float32";
    std::uint64_t seed = 1;
    std::size_t batch = 32;
    std::string out;
};

/// Images uniform in [0, 1) (24 random bits each, exact in float32) and labels uniform in 0..9.
struct Batch {
    ad::Tensor x;                     // (batch, 1, 28, 28)
    std::vector<std::int32_t> labels; // (batch)
};

Batch make_batch(std::size_t batch, std::uint64_t seed) {
    ad::Rng rng(seed ^ 0xba7c4u); // not the initializers' stream
    const ad::Shape shape{batch, 1, 28, 28};
    std::vector<float> pixels(shape.elements());
    for (float& p : pixels) p = rng.uniform();
    std::vector<std::int32_t> labels(batch);
    for (std::int32_t& label : labels) label = static_cast<std::int32_t>(rng() % 10);
    return {ad::Tensor::from_floats(shape, pixels), labels};
}

int run(const Options& o) {
    mixprec::amp::set_global_policy(o.precision);
    models::Sequential model = models::make_model(o.model);
    model.build(ad::Shape{1, 28, 28}, o.seed);
    const Batch batch = make_batch(o.batch, o.seed);

    const std::vector<ad::Variable> variables = model.trainable_variables();
    ad::Rng dropout_rng(o.seed); // the built-in models draw nothing from it
    ad::Tensor loss;
    std::vector<ad::Tensor> grads;
    {
        ad::GradientTape tape;
        const ad::Tensor logits = model(batch.x, {.training = true, .dropout_rng = &dropout_rng});
        loss = ad::sparse_categorical_crossentropy(batch.labels, logits, true);
        grads = tape.gradient(loss, variables);
    }

    std::vector<models::NamedTensor> out;
    for (const ad::Variable& v : model.variables()) out.push_back({v.name(), v.value()});
    const std::vector<float> labels(batch.labels.begin(), batch.labels.end());
    out.push_back({"__input__", batch.x});
    out.push_back({"__labels__", ad::Tensor::from_floats(ad::Shape{o.batch}, labels)});
    out.push_back({"__loss__", loss.to(ad::Dtype::float32)});
    for (std::size_t i = 0; i < variables.size(); ++i)
        out.push_back({"grad/" + variables[i].name(), grads[i].to(ad::Dtype::float32)});
    models::write_safetensors(o.out, out,
                              {{"model", o.model},
                               {"precision", o.precision},
                               {"seed", std::to_string(o.seed)},
                               {"isa", std::string(ad::name_of(ad::isa()))}});
    std::printf("%s, %s, seed %llu, batch %zu: loss %.9g -> %s\n", o.model.c_str(), o.precision.c_str(),
                static_cast<unsigned long long>(o.seed), o.batch, double(loss.flat(0)), o.out.c_str());
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"Loss and gradients of one batch, for tests/conformance/gradient_oracle.py"};
    app.add_option("--model", o.model, "Built-in model")->check(CLI::IsMember({"mlp", "cnn", "vit"}));
    app.add_option("--precision", o.precision, "Dtype policy")->check(CLI::IsMember({"float32", "mixed_float16"}));
    app.add_option("--seed", o.seed, "Seed of the weights and the batch")->capture_default_str();
    app.add_option("--batch", o.batch, "Examples in the batch")->check(CLI::Range(1, 65536))->capture_default_str();
    app.add_option("--out", o.out, "The safetensors file to write")->required();
    CLI11_PARSE(app, argc, argv);
    try {
        return run(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "conformance_gradients: %s\n", e.what());
        return 1;
    }
}
