#pragma once
/// What the measured modes chose in this process: ConvBackend::measured (ops_conv.hpp) for each
/// convolution pass and shape, Float32Gemm::measured (kernels_matmul.hpp) for each product's shape. Each
/// choice is made once, at the first use of its shape, by timing every candidate, and kept after; or it is
/// adopted, from a checkpoint or a choices file (models/io/measured_choices.hpp), and then taken without
/// timing. Choices rest on timings, so two runs may choose differently and end with different bits; a run
/// that adopts the choices of another takes the same routes, and so gets the same bits.

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mixprec::autodiff {

/// One choice: what it is for and the candidate taken.
struct MeasuredChoice {
    /// The pass and shape it is for, as measured_choices() begins its line: "conv2d forward x (128, 32, 13,
    /// 13) w (64, 32, 3, 3) float32 stride (1, 1) padding (0, 0) dilation (1, 1)", "matmul ...".
    std::string key;
    std::string chosen; ///< the candidate's name: "im2col", "im2col_onednn", "onednn", "openblas"
    friend bool operator==(const MeasuredChoice&, const MeasuredChoice&) = default;
};

/// Longest key and name a choice may have.
inline constexpr std::size_t max_choice_key_bytes = 4096;
inline constexpr std::size_t max_choice_name_bytes = 64;

/// Why `choice` is not one a process holds, if it is not: a key is 1 to max_choice_key_bytes of text (UTF-8)
/// without control characters (no tab, no line end) and not beginning with '#'; a name is 1 to
/// max_choice_name_bytes letters, digits or '_'. Every choice mixprec makes is one; these rules let a
/// choices file (models/io/measured_choices.hpp) hold a choice on a line.
std::optional<std::string> measured_choice_problem(const MeasuredChoice& choice);

/// A line per choice, in the order made: what was chosen for, the winner, and each candidate's best time,
/// e.g. "conv2d forward x (128, 32, 13, 13) w (64, 32, 3, 3) float32 stride (1, 1) padding (0, 0)
/// dilation (1, 1): im2col_onednn, best of 3: im2col 4.79 ms, im2col_onednn 4.18 ms, onednn 4.52 ms";
/// an adopted choice says so instead of giving times ("...: im2col_onednn, adopted").
std::vector<std::string> measured_choices();

/// Every choice in force, made or adopted, in the order made or first adopted.
std::vector<MeasuredChoice> measured_choice_list();

/// Makes `choices` this process's, in place of any made or adopted before for the same keys: the first use
/// of each key then takes its candidate without timing. A choice whose name is not among its key's
/// candidates (written by another version of mixprec, say) is measured again at its first use.
/// std::invalid_argument, before anything changes, for a choice that measured_choice_problem refuses.
void adopt_measured_choices(std::span<const MeasuredChoice> choices);

/// Forgets every choice: the next use of each key measures again.
void forget_measured_choices();

} // namespace mixprec::autodiff
