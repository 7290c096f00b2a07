#pragma once
/// Checkpoints of a model (a Sequential or your own Model): save_checkpoint and load_checkpoint
/// (models/io/checkpoint.hpp) with variables = model.variables() and policy = the first layer's policy (the
/// global policy for a model without layers). Same file format, guarantees and errors.

#include <mixprec/models/io/checkpoint.hpp>
#include <mixprec/models/training/model.hpp>

namespace mixprec::models {

void save_checkpoint(const std::filesystem::path& path, const Model& model, const optim::Optimizer& optimizer,
                     const TrainingState* state = nullptr, SaveOptions options = {});
void load_checkpoint(const std::filesystem::path& path, Model& model, optim::Optimizer& optimizer,
                     TrainingState* state = nullptr);

} // namespace mixprec::models
