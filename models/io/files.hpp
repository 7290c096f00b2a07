#pragma once
/// Files as every mixprec format reads and writes them (checkpoints, and the weight and array formats):
/// whole-file reads that refuse oversized files before reading them, and writes that replace a file
/// atomically.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <vector>

namespace mixprec::models {

/// A file that cannot be read or written: the message says what failed and the system's reason.
class file_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// The bytes of the regular file at `path`. file_error for a file that cannot be opened or read, is not
/// a regular file, or is larger than `max_bytes` (checked before anything is allocated). A file that
/// shrinks while it is read comes back shorter: the caller's format checks its own lengths.
std::vector<std::uint8_t> read_file_bounded(const std::filesystem::path& path, std::uint64_t max_bytes);

/// Replaces the file at `path` by `bytes` atomically: they are written to "<path>.tmp" in the same
/// directory, flushed to disk (fsync of the file, then of the directory) and renamed over `path`, so a
/// crash at any moment leaves the old file or the new one, never a mix. Two writes to the same path must
/// not run at the same time.
///
/// With keep_last = K > 1, the previous files are kept as "<path>.1" (newest) up to "<path>.<K-1>"
/// (oldest): before the rename, "<path>.<i>" becomes "<path>.<i+1>" for i = K-2 … 1 and the current
/// `path` is hard-linked (copied where links are not supported) to "<path>.1", so `path` itself is never
/// missing. Files numbered K or more are left alone.
///
/// file_error naming the file and the system's reason when something cannot be written; the previous
/// file is then left as it was, and no temporary file remains. std::invalid_argument for keep_last == 0.
void write_file_atomically(const std::filesystem::path& path, std::span<const std::uint8_t> bytes,
                           std::size_t keep_last = 1);

} // namespace mixprec::models
