// libFuzzer target for safetensors files. parse_safetensors must either succeed or throw
// safetensors_error; anything else (another exception, a crash, a sanitizer report, an allocation over
// -malloc_limit_mb) is a finding. A file that parses must write again (safetensors_bytes) into bytes that
// parse to the same names, dtypes, shapes, values and metadata.

#include <mixprec/models/io/safetensors.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

[[noreturn]] void finding(const char* what) {
    std::fprintf(stderr, "fuzz_load_safetensors: %s\n", what);
    std::abort();
}

bool same(const mixprec::autodiff::Tensor& a, const mixprec::autodiff::Tensor& b) {
    return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace mixprec::models;
    SafetensorsContent content;
    try {
        content = parse_safetensors({data, size});
    } catch (const safetensors_error&) {
        return 0;
    }
    SafetensorsContent again;
    try {
        again = parse_safetensors(safetensors_bytes(content.tensors, content.metadata));
    } catch (const safetensors_error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        finding("a file that parsed does not write and parse again");
    }
    if (again.metadata != content.metadata || again.tensors.size() != content.tensors.size())
        finding("writing and parsing again changed the metadata or the tensor count");
    for (std::size_t i = 0; i < content.tensors.size(); ++i)
        if (again.tensors[i].name != content.tensors[i].name ||
            !same(again.tensors[i].tensor, content.tensors[i].tensor))
            finding("writing and parsing again changed a tensor");
    return 0;
}
