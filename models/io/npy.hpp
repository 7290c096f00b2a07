#pragma once
/// NumPy's array files: .npy (one array), read and written by our own code; .npz archives of them are in
/// models/io/npz.hpp.
///
///   offset 0    6 bytes   magic "\x93NUMPY"
///   offset 6    2 bytes   version: 1.0, 2.0 or 3.0
///   offset 8    H         header length: uint16 (1.0) or uint32 (2.0, 3.0), little-endian
///   then        H bytes   a Python dict literal, padded with spaces and ended by a newline:
///                         {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
///   the rest    the elements, C order (row-major), exactly shape × itemsize bytes
///
/// The element types read and written are those of NpyType, little-endian ('<') or, for bytes, '|'.
/// The header is parsed by a small parser of that literal's grammar (keys in any order, quoted with ' or ",
/// exactly the three keys, a trailing comma allowed, spaces and tabs between tokens, the newline last),
/// never evaluated. Files are written as NumPy 2 writes them: version 1.0, keys in that order, the header
/// padded so the data starts at a multiple of 64 bytes; a written .npy is byte for byte what
/// np.save writes for the same array.
///
///
/// Reading treats every input as hostile: nothing is allocated beyond what the input holds. Every problem
/// is an npy_error saying what is wrong (and, for files, which file).
///
/// Arrays hold their bytes little-endian; this implementation assumes a little-endian host (checked at
/// compile time), as mixprec's tensors do.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mixprec::models {

/// A .npy or .npz input that cannot be read or written: the message names the file (when there is one),
/// the member (in an .npz) and what is wrong.
class npy_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// Larger .npy and .npz files are refused before they are read, and an .npz whose members declare more
/// uncompressed bytes than this (each, or all together) before they are inflated.
inline constexpr std::uint64_t max_npy_file_bytes = std::uint64_t{64} << 30; // 64 GiB
/// The first six bytes of every .npy file.
inline constexpr std::array<std::uint8_t, 6> npy_magic = {0x93, 'N', 'U', 'M', 'P', 'Y'};
/// Longer .npy headers are refused: NumPy's own default limit (np.load's max_header_size).
inline constexpr std::size_t max_npy_header_bytes = 10000;

/// The element types mixprec reads and writes, with their descr in a file.
enum class NpyType : std::uint8_t {
    float32, ///< '<f4'
    float64, ///< '<f8'
    float16, ///< '<f2'
    uint8,   ///< '|u1' ('<u1' is read too)
    int32,   ///< '<i4'
    int64,   ///< '<i8'
};

/// "float32", "float64", "float16", "uint8", "int32", "int64" (NumPy's names).
std::string_view to_string(NpyType type);
/// The descr written in a header: "<f4", "<f8", "<f2", "|u1", "<i4", "<i8".
std::string_view descr(NpyType type);
/// Bytes per element: 4, 8, 2, 1, 4, 8.
std::size_t itemsize(NpyType type);

/// An array as a .npy file holds it.
struct NpyArray {
    NpyType type = NpyType::float32;
    autodiff::Shape shape;           ///< rank 0: a scalar (one element); a dimension may be 0
    std::vector<std::uint8_t> bytes; ///< shape.elements() × itemsize(type) bytes, little-endian, C order

    friend bool operator==(const NpyArray&, const NpyArray&) = default;
};

/// Parses the bytes of a .npy file, checking everything (see the file comment): npy_error for a wrong
/// magic, a version other than 1.0, 2.0 and 3.0, a header length beyond the input or over
/// max_npy_header_bytes, a header outside the grammar or without exactly the keys descr, fortran_order
/// and shape, fortran_order True, a descr that is big-endian or not one of NpyType's, a negative
/// dimension, more than Shape::max_rank dimensions, more than Shape::max_elements elements, and data that
/// is not exactly elements × itemsize bytes (truncated, or trailing bytes).
NpyArray parse_npy(std::span<const std::uint8_t> bytes);
/// Reads and parses the .npy file at `path` (at most max_npy_file_bytes). npy_error naming the file for
/// every problem, including a file that is missing or cannot be read.
NpyArray read_npy(const std::filesystem::path& path);
/// The bytes of a .npy file holding `array` (as np.save writes them). std::invalid_argument when
/// array.bytes does not hold shape.elements() × itemsize(type) bytes.
std::vector<std::uint8_t> npy_bytes(const NpyArray& array);
/// Writes npy_bytes(array) to `path` atomically (models/io/files.hpp: a crash leaves the old file or the
/// new one). npy_error naming the file and the reason when it cannot be written; std::invalid_argument
/// as npy_bytes.
void write_npy(const std::filesystem::path& path, const NpyArray& array);

/// A tensor of the array's shape and values:
///   float32 → float32 and float16 → float16, the same bits;
///   float64 → float32, each value rounded once to nearest even (beyond float32's range: ±inf);
///   uint8, int32, int64 → float32 holding each integer's value, exact up to 2^24 in magnitude and
///   rounded to nearest even beyond.
autodiff::Tensor to_tensor(const NpyArray& array);
/// An array of the tensor's shape and values: float32 → '<f4' and float16 → '<f2', the same bits;
/// bfloat16, cbfloat16, float8_e4m3 and float8_e5m2 → '<f4', each value widened exactly to float32.
NpyArray from_tensor(const autodiff::Tensor& tensor);

} // namespace mixprec::models
