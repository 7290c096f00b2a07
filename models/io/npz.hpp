#pragma once
/// NumPy's .npz archives: a zip of .npy members (models/io/npy.hpp), as np.savez and np.savez_compressed
/// write them, read and written by our own code (deflate through zlib).
///
/// An .npz is parsed through its end-of-central-directory record and central directory (the local
/// headers are checked against it). Members are stored (method 0) or deflated (method 8), each named
/// "<name>.npy"; the CRC-32 of every member is checked. ZIP64 records and fields are read (NumPy writes
/// every member with a ZIP64 local header), as are data descriptors (checked against the central
/// directory). Refused: encryption, other compression methods, multi-disk archives, duplicate names,
/// members that overlap each other or the central directory, and sizes, CRCs or names that disagree
/// between the central directory, the local header, a data descriptor and the data. write_npz writes
/// plain zip (no ZIP64), so it refuses members and archives of 4 GiB or more.
///
/// Reading treats every input as hostile: nothing is allocated beyond what the input holds, except that
/// a deflated member is inflated into the size its central directory declares, which is checked first
/// against max_npy_file_bytes and against the deflate format's largest ratio (1032:1). Every problem is
/// an npy_error saying what is wrong (and, for files, which file; for members, which member).

#include <mixprec/models/io/npy.hpp>

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mixprec::models {

/// The arrays of an .npz, each under its member's name without ".npy", in the archive's order.
using NpzArrays = std::vector<std::pair<std::string, NpyArray>>;

/// Parses the bytes of an .npz archive, checking everything (see the file comment); each member is
/// parsed as parse_npy does. npy_error naming the member when there is one.
NpzArrays parse_npz(std::span<const std::uint8_t> bytes);
/// Reads and parses the .npz file at `path` (at most max_npy_file_bytes); npy_error naming the file.
NpzArrays read_npz(const std::filesystem::path& path);
/// The bytes of an .npz archive holding `arrays` in that order, each as member "<name>.npy", stored or,
/// with `compress`, deflated (zlib's default level, as np.savez_compressed). Every member is dated
/// 1980-01-01 00:00, so equal arrays give equal bytes. std::invalid_argument for a repeated name and as
/// npy_bytes; npy_error for a member or archive of 4 GiB or more (this writer writes no ZIP64).
std::vector<std::uint8_t> npz_bytes(const NpzArrays& arrays, bool compress = false);
/// Writes npz_bytes(arrays, compress) to `path` atomically; npy_error naming the file and the reason
/// when it cannot be written, and errors as npz_bytes.
void write_npz(const std::filesystem::path& path, const NpzArrays& arrays, bool compress = false);

} // namespace mixprec::models
