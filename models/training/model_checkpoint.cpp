#include <mixprec/models/training/model_checkpoint.hpp>

#include <mixprec/amp/policy.hpp>

namespace mixprec::models {

namespace {

std::string policy_of(const Model& model) {
    return model.layers().empty() ? amp::global_policy().name() : model.layers().front()->policy().name();
}

} // namespace

void save_checkpoint(const std::filesystem::path& path, const Model& model, const optim::Optimizer& optimizer,
                     const TrainingState* state, SaveOptions options) {
    save_checkpoint(path, model.variables(), policy_of(model), optimizer, state, options);
}

void load_checkpoint(const std::filesystem::path& path, Model& model, optim::Optimizer& optimizer,
                     TrainingState* state) {
    load_checkpoint(path, model.variables(), policy_of(model), optimizer, state);
}

} // namespace mixprec::models
