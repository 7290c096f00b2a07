#pragma once
/// Choices files: the measured modes' choices (autodiff::MeasuredChoice, tensor/measured.hpp) kept between
/// runs, as FFTW keeps its wisdom. A run that adopts the choices another run made takes the same routes
/// without timing them, and so computes the same bits; `mixprec-train --choices FILE` reads FILE when it
/// exists and writes it at the end. Checkpoints carry the choices too (checkpoint.hpp).
///
/// The file is text, a line per choice, the key and the candidate's name separated by a tab:
///
///   # mixprec measured choices, format 1
///   conv2d forward x (128, 1, 28, 28) w (32, 1, 3, 3) float32 stride (1, 1) padding (0, 0) dilation (1, 1)<TAB>im2col_onednn
///   matmul (128, 784) @ (784, 512) float32<TAB>openblas
///
/// The first line is exactly the one above. Other lines that begin with '#', and empty lines, are
/// comments. Lines end with "\n" (a "\r" before it is allowed).
///
/// Reading treats the file as hostile: its size is checked (max_choices_file_bytes) before it is read;
/// every line must be a comment or hold exactly one tab between a key and a name that
/// autodiff::measured_choice_problem accepts (a key is text without control characters, a name letters,
/// digits or '_'); a key may appear once. Anything else is a choices_error naming the line. Names that are
/// not a candidate of their key are accepted here (a newer mixprec may have more candidates): adopted, such
/// a choice is measured again at its first use.

#include <mixprec/autodiff/tensor/measured.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::models {

/// A choices file or text that cannot be read, parsed or written: the message says what and where.
class choices_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// Larger files are refused before they are read (a choice takes about 150 bytes).
inline constexpr std::uint64_t max_choices_file_bytes = std::uint64_t{4} << 20; // 4 MiB

/// The text of a choices file holding `choices`, in their order. std::invalid_argument for a choice that
/// the file could not hold (a key or name that reading would refuse), naming it.
std::string choices_text(std::span<const autodiff::MeasuredChoice> choices);

/// The choices in `text`, in their order. choices_error "line N: ..." for text that is not a choices file.
std::vector<autodiff::MeasuredChoice> parse_choices(std::string_view text);

/// The choices in the file at `path`. choices_error naming the path for a file that is missing, unreadable,
/// larger than max_choices_file_bytes or not a choices file.
std::vector<autodiff::MeasuredChoice> read_choices_file(const std::filesystem::path& path);

/// Replaces the file at `path` by a choices file holding `choices`, atomically (write_file_atomically,
/// files.hpp). choices_error naming the path and the system's reason when it cannot be written.
void write_choices_file(const std::filesystem::path& path, std::span<const autodiff::MeasuredChoice> choices);

} // namespace mixprec::models
