#pragma once
/// The trainer's picture of rounding telemetry (amp/telemetry.hpp): where each layer's gradients lie in
/// the format's range, before and after the loss scale (the picture of Micikevicius et al. 2017, Mixed
/// Precision Training, Fig. 3), and how much of them underflowed over training. Drawn by gnuplot into a
/// PNG or SVG file, as plot.hpp's run plot is.
///
/// Gradients are grouped by layer, one line per layer in every panel: a layer's output gradient is the
/// entry "<layer>/output_grad" (one per layer the model called itself), and its weight gradients are the
/// entries of the variables under it, summed: those named "<layer>/..." ("transformer_block" takes
/// "transformer_block/attention/qkv/kernel"; a variable under no such layer goes to its name up to the last
/// '/'). Summing keeps the picture to one line per layer that the two rows and the two underflow panels
/// share, however many variables and sublayers a layer has (a bias's few values would otherwise draw a
/// noisy line of its own, and a transformer block a dozen). The forward and backward entries
/// ("<layer>/forward", "<layer>/backward", "loss/backward") are not drawn. Each layer keeps one color
/// throughout the figure (colors repeat after ten layers), listed in the key at the right with the line
/// styles and the format's ranges.
///
///   ┌ step a · scale 2^k ┐┌ step b ───────────┐┌ step c ───────────┐  key: layers,
///   │ weight gradients   ││                   ││                   │  as rounded /
///   ├────────────────────┤├───────────────────┤├───────────────────┤  before the scale,
///   │ output gradients   ││                   ││                   │  lost / subnormal /
///   └──── log₂|g| ───────┘└───────────────────┘└───────────────────┘  normal / overflow
///   ┌ weight gradients lost to underflow (%) ┐┌ output gradients lost to underflow (%) ┐
///   └──────────────── step ──────────────────┘└──────────────────── step ───────────────┘
///
/// Top, one column per chosen step (the first point with histograms, the middle one of those, and the
/// last; fewer when there are fewer): the histogram of log₂|g| from RoundingStats::exponent_histogram, as a
/// staircase with one step per binade, y = the share of the layer's values in it (% of its count, zeros
/// included; log axis), x = log₂|g| before rounding. Solid: as rounded, i.e. multiplied by the step's loss
/// scale; dashed: before the scale (shifted by −log₂ loss_scale; not drawn when the scale is 1). The
/// background shades the format's range from rounding_thresholds(format): lost (rounds to zero),
/// subnormal, normal, overflow. Zeros, float32 subnormals and non-finite values have no place on the
/// log axis and are left out of the staircases.
/// Bottom: each layer's underflow share (underflow / count, %) at every point, weight gradients left and
/// output gradients right, with the loss scale as a grey staircase on the right axis (log₂) and the chosen
/// steps marked by dotted lines.

#include <mixprec/amp/telemetry.hpp>
#include <mixprec/autodiff/tensor/dtype.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

namespace mixprec::train {

/// One step's telemetry as the picture shows it (from models::StepLogs).
struct TelemetryPoint {
    std::int64_t step;                               ///< the step's number
    double loss_scale;                               ///< the scale the step used (StepLogs::loss_scale)
    std::shared_ptr<const amp::Telemetry> telemetry; ///< null: the point is left out
};

/// Draws `points` (in step order) into `out` with gnuplot, under `title`, against the range of `format`
/// (the compute dtype the gradients were rounded into). The format follows the extension: ".png"
/// (gnuplot's pngcairo terminal, or its plain png one when gnuplot lacks cairo) or ".svg". Points
/// without histograms (telemetry recorded without FitOptions::telemetry_histogram) still give the
/// underflow shares; when none has them, a note takes the histograms' place. Underflow shares of a layer
/// absent from a point leave a gap there.
/// Errors: std::invalid_argument naming `out` when its extension is neither .png nor .svg, or when no
/// point has telemetry; std::runtime_error saying to install gnuplot-nox when gnuplot is not on the PATH,
/// and std::runtime_error with gnuplot's own message when it fails (e.g. `out`'s directory does not exist).
/// The data and script go through a temporary directory, removed before returning.
void write_telemetry_plot(const std::filesystem::path& out, std::span<const TelemetryPoint> points,
                          autodiff::Dtype format, const std::string& title);

} // namespace mixprec::train
