// libFuzzer target for NumPy files. Each input is parsed as a .npy file and as an .npz archive: each parse
// must either succeed or throw npy_error; anything else (another exception, a crash, a sanitizer report,
// an allocation over -malloc_limit_mb) is a finding. What parses must write again (npy_bytes, npz_bytes
// stored and deflated) into bytes that parse to the same arrays, and convert to a tensor; float32 and
// float16 arrays must come back from that tensor bit for bit.

#include <mixprec/models/io/npy.hpp>
#include <mixprec/models/io/npz.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>

namespace {

using namespace mixprec::models;

[[noreturn]] void finding(const char* what) {
    std::fprintf(stderr, "fuzz_load_npy: %s\n", what);
    std::abort();
}

void check_array(const NpyArray& a) {
    if (parse_npy(npy_bytes(a)) != a) finding("a .npy that parsed does not write and parse again identically");
    const mixprec::autodiff::Tensor t = to_tensor(a);
    if (t.shape() != a.shape) finding("to_tensor changed the shape");
    if ((a.type == NpyType::float32 || a.type == NpyType::float16) && from_tensor(t) != a)
        finding("a float32 or float16 array did not come back from its tensor bit for bit");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::uint8_t> bytes(data, size);
    try {
        try {
            check_array(parse_npy(bytes));
        } catch (const npy_error&) {}
        NpzArrays arrays;
        try {
            arrays = parse_npz(bytes);
        } catch (const npy_error&) {
            return 0;
        }
        for (const auto& [name, array] : arrays) check_array(array);
        for (const bool compress : {false, true})
            if (parse_npz(npz_bytes(arrays, compress)) != arrays)
                finding("an .npz that parsed does not write and parse again identically");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_load_npy: unexpected exception: %s\n", e.what());
        std::abort();
    }
    return 0;
}
