#include <mixprec/models/io/weights.hpp>

#include <mixprec/models/io/npz.hpp>
#include <mixprec/models/io/safetensors.hpp>

#include <mixprec/version.hpp>

#include <set>
#include <string>

namespace mixprec::models {
namespace {

bool is_npz(const std::filesystem::path& path) { return path.extension() == ".npz"; }

/// "1 tensor", "3 tensors".
std::string count(std::size_t n, const char* noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

/// Throws the error of the file's format: npy_error for .npz, safetensors_error otherwise.
[[noreturn]] void fail(const std::filesystem::path& path, const std::string& message) {
    const std::string text = "weights '" + path.string() + "': " + message;
    if (is_npz(path)) throw npy_error(text);
    throw safetensors_error(text);
}

/// The file's tensors, by name, in the file's order.
std::vector<NamedTensor> read_tensors(const std::filesystem::path& path) {
    if (!is_npz(path)) return read_safetensors(path).tensors;
    std::vector<NamedTensor> tensors;
    for (const auto& [name, array] : read_npz(path)) tensors.push_back({name, to_tensor(array)});
    return tensors;
}

} // namespace

void save_weights(const std::filesystem::path& path, const std::vector<autodiff::Variable>& variables,
                  const SaveWeightsOptions& options) {
    const std::string dtype(autodiff::name_of(options.dtype));
    if (is_npz(path)) {
        if (options.dtype != autodiff::Dtype::float32 && options.dtype != autodiff::Dtype::float16)
            fail(path, "NumPy has no " + dtype + ": an .npz holds float32 or float16 weights");
        NpzArrays arrays;
        for (const autodiff::Variable& v : variables)
            arrays.emplace_back(v.name(), from_tensor(v.value().to(options.dtype)));
        write_npz(path, arrays);
        return;
    }
    if (!safetensors_dtype(options.dtype))
        fail(path,
             "safetensors cannot hold " + dtype + ": choose float32, float16, bfloat16, float8_e4m3 or float8_e5m2");
    std::vector<NamedTensor> tensors;
    for (const autodiff::Variable& v : variables) tensors.push_back({v.name(), v.value().to(options.dtype)});
    std::map<std::string, std::string> metadata = options.metadata;
    metadata.emplace("producer", "mixprec " MIXPREC_VERSION_STRING);
    write_safetensors(path, tensors, metadata);
}

void load_weights(const std::filesystem::path& path, const std::vector<autodiff::Variable>& variables,
                  const LoadWeightsOptions& options) {
    const std::vector<NamedTensor> tensors = read_tensors(path);
    const std::string counts = tensors.size() == variables.size()
                                   ? ""
                                   : " (the file holds " + count(tensors.size(), "tensor") + ", the model has " +
                                         count(variables.size(), "variable") + ")";
    std::vector<const autodiff::Tensor*> sources;
    std::set<std::string> wanted;
    for (const autodiff::Variable& v : variables) {
        const autodiff::Tensor* t = find_tensor(tensors, v.name());
        if (!t)
            fail(path, "the file has no tensor '" + v.name() + "' for variable '" + v.name() + "' of shape " +
                           v.shape().to_string() + counts);
        if (t->shape() != v.shape())
            fail(path, "variable '" + v.name() + "' has shape " + v.shape().to_string() + ", the file's tensor " +
                           t->shape().to_string() + counts);
        if (!wanted.insert(v.name()).second) fail(path, "two variables are called '" + v.name() + "'");
        sources.push_back(t);
    }
    if (!options.ignore_extra)
        for (const NamedTensor& t : tensors)
            if (!wanted.contains(t.name))
                fail(path, "the file's tensor '" + t.name + "' belongs to no variable; it has shape " +
                               t.tensor.shape().to_string() + counts +
                               (variables.empty() ? ": is it built?"
                                                  : " (LoadWeightsOptions::ignore_extra skips such tensors)"));
    for (std::size_t i = 0; i < variables.size(); ++i) {
        autodiff::Variable v = variables[i];
        v.assign(*sources[i]); // widened exactly to float32 (float64 in an .npz: rounded once)
    }
}

} // namespace mixprec::models
