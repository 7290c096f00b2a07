#pragma once
/// Weights in and out as safetensors files (models/io/safetensors.hpp), the format the Python ecosystem
/// loads, or, for a path ending in ".npz", as NumPy's np.savez archives (models/io/npz.hpp): one tensor
/// per variable, under the variable's name ("dense/kernel", ...), with its shape.
///
///   models::save_weights("mlp.safetensors", model.variables());                    // float32 masters
///   models::save_weights("mlp-f16.safetensors", model.variables(), {.dtype = Dtype::float16});
///   models::save_weights("mlp.npz", model.variables());                            // np.load reads it
///   models::load_weights("mlp.safetensors", model.variables());
///
/// Layouts are mixprec's: a Dense kernel is (inputs, outputs), as Keras's, the transpose of a PyTorch
/// nn.Linear weight; a Conv2D kernel is (filters, channels, kh, kw), as a PyTorch nn.Conv2d weight
/// (tests/conformance/gradient_oracle.py maps every layer of the built-in models).

#include <mixprec/autodiff/tensor/dtype.hpp>
#include <mixprec/autodiff/variable.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace mixprec::models {

struct SaveWeightsOptions {
    /// The dtype the float32 masters are written in: float32 (exact), or a narrower one they are rounded
    /// to once, to nearest even (float16, bfloat16, float8_e4m3, float8_e5m2; an .npz: float16 only).
    autodiff::Dtype dtype = autodiff::Dtype::float32;
    /// Written as the safetensors file's "__metadata__", with "producer": "mixprec <version>" added (an
    /// .npz has no place for it).
    std::map<std::string, std::string> metadata{};
};

/// Writes the masters of `variables` to `path` (atomically), each under its variable's name.
/// safetensors_error (npy_error for an .npz) for two variables of the same name, for a dtype the format
/// cannot hold (cbfloat16; in an .npz, anything but float32 and float16) and when the file cannot be
/// written.
void save_weights(const std::filesystem::path& path, const std::vector<autodiff::Variable>& variables,
                  const SaveWeightsOptions& options = {});

struct LoadWeightsOptions {
    /// Whether tensors of the file that no variable is named after are ignored (else they are an error).
    bool ignore_extra = false;
};

/// Sets the master of each of `variables` to the file's tensor of the same name, widened exactly to
/// float32 whatever its dtype (an .npz's float64 or integer arrays: rounded once); working copies follow
/// on their next read. Checks everything first and changes nothing on failure: safetensors_error
/// (npy_error for an .npz) naming the first variable (in the order given) that is missing from the file
/// (with its shape) or whose shape differs (with both shapes), then a tensor no variable is named after
/// (unless ignore_extra; with its shape), adding both counts when the file's tensors and the variables are
/// not as many; or what is wrong with the file.
void load_weights(const std::filesystem::path& path, const std::vector<autodiff::Variable>& variables,
                  const LoadWeightsOptions& options = {});

} // namespace mixprec::models
