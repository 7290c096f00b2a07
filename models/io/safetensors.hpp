#pragma once
/// safetensors files: the tensor format that Hugging Face, PyTorch, JAX and Candle read and write.
///
///   8 bytes   N, the header's length (uint64, little-endian)
///   N bytes   the header: a UTF-8 JSON object, padded with spaces, mapping each tensor's name to
///             {"dtype": "F16", "shape": [2, 3], "data_offsets": [begin, end]}, and the optional key
///             "__metadata__" to an object of strings
///   the rest  the tensors' bytes, little-endian, row-major; offsets count from the start of this part
///
/// mixprec reads and writes the dtypes it computes in: F32, F16, BF16, F8_E4M3 and F8_E5M2 (cbfloat16
/// has no safetensors name). The header is parsed by nlohmann-json.
///
/// Reading treats every file as hostile and checks everything before it allocates a tensor: the file's
/// size, the header's length (at most max_safetensors_header_bytes), the JSON (one object, no repeated
/// key, nothing nested deeper than the format allows), each entry (a known dtype, a shape within Shape's
/// limits, offsets that hold exactly shape × dtype bytes) and the data (the tensors cover it exactly, in
/// some order, without overlap or gap). Any problem is a safetensors_error saying what and where.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::models {

/// A safetensors file that cannot be read or written: the message says what and why.
class safetensors_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// Longest header a file may have (16 MiB: a model with a hundred thousand tensors needs a few MiB).
inline constexpr std::uint64_t max_safetensors_header_bytes = std::uint64_t{16} << 20;
/// Larger files are refused before they are read.
inline constexpr std::uint64_t max_safetensors_file_bytes = std::uint64_t{64} << 30; // 64 GiB

/// A tensor and its name in the file.
struct NamedTensor {
    std::string name;
    autodiff::Tensor tensor;
};

/// The tensor called `name` among `tensors`, or nullptr.
const autodiff::Tensor* find_tensor(std::span<const NamedTensor> tensors, std::string_view name);

/// What a safetensors file holds.
struct SafetensorsContent {
    std::vector<NamedTensor> tensors;            ///< in the order of their data in the file
    std::map<std::string, std::string> metadata; ///< "__metadata__", empty without it
    /// The tensor called `name`, or nullptr.
    const autodiff::Tensor* find(std::string_view name) const { return find_tensor(tensors, name); }
};

/// The safetensors name of `dtype` ("F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"), or nothing for cbfloat16.
std::optional<std::string_view> safetensors_dtype(autodiff::Dtype dtype);

/// The bytes of a safetensors file holding `tensors` (in that order) and `metadata`. The header is padded
/// with spaces so that the data begins at a multiple of 8 bytes. safetensors_error for a name that is
/// empty, repeated, "__metadata__" or not UTF-8, and for a cbfloat16 tensor.
std::vector<std::uint8_t> safetensors_bytes(std::span<const NamedTensor> tensors,
                                            const std::map<std::string, std::string>& metadata = {});
/// Writes safetensors_bytes(tensors, metadata) to `path` atomically (models/io/files.hpp).
/// safetensors_error naming the path and the reason.
void write_safetensors(const std::filesystem::path& path, std::span<const NamedTensor> tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// Parses the bytes of a safetensors file, checking everything (see the file comment).
SafetensorsContent parse_safetensors(std::span<const std::uint8_t> bytes);
/// Reads and parses the file at `path`; safetensors_error naming the path.
SafetensorsContent read_safetensors(const std::filesystem::path& path);

} // namespace mixprec::models
