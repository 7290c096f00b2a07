#include <mixprec/models/io/weights.hpp>

#include <mixprec/models/io/safetensors.hpp>

#include <mixprec/version.hpp>

#include <set>

namespace mixprec::models {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& message) {
    throw safetensors_error("weights '" + path.string() + "': " + message);
}

} // namespace

void save_weights(const std::filesystem::path& path, const std::vector<autodiff::Variable>& variables,
                  const SaveWeightsOptions& options) {
    if (!safetensors_dtype(options.dtype))
        fail(path, "safetensors cannot hold " + std::string(autodiff::name_of(options.dtype)) +
                       ": choose float32, float16, bfloat16, float8_e4m3 or float8_e5m2");
    std::vector<NamedTensor> tensors;
    for (const autodiff::Variable& v : variables) tensors.push_back({v.name(), v.value().to(options.dtype)});
    std::map<std::string, std::string> metadata = options.metadata;
    metadata.emplace("producer", "mixprec " MIXPREC_VERSION_STRING);
    write_safetensors(path, tensors, metadata);
}

void load_weights(const std::filesystem::path& path, const std::vector<autodiff::Variable>& variables,
                  const LoadWeightsOptions& options) {
    const SafetensorsContent content = read_safetensors(path);
    std::vector<const autodiff::Tensor*> sources;
    std::set<std::string> wanted;
    for (const autodiff::Variable& v : variables) {
        const autodiff::Tensor* t = content.find(v.name());
        if (!t) fail(path, "the file has no tensor '" + v.name() + "' for variable '" + v.name() + "'");
        if (t->shape() != v.shape())
            fail(path, "variable '" + v.name() + "' has shape " + v.shape().to_string() + ", the file's tensor " +
                           t->shape().to_string());
        if (!wanted.insert(v.name()).second) fail(path, "two variables are called '" + v.name() + "'");
        sources.push_back(t);
    }
    if (!options.ignore_extra)
        for (const NamedTensor& t : content.tensors)
            if (!wanted.contains(t.name))
                fail(path, "the file's tensor '" + t.name + "' belongs to no variable" +
                               (variables.empty() ? " (the model has none: is it built?)"
                                                  : " (LoadWeightsOptions::ignore_extra skips such tensors)"));
    for (std::size_t i = 0; i < variables.size(); ++i) {
        autodiff::Variable v = variables[i];
        v.assign(*sources[i]); // widened exactly to float32
    }
}

} // namespace mixprec::models
