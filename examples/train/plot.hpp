#pragma once
/// The trainer's picture of a run: four stacked panels sharing the step axis (training loss, test
/// accuracy, loss scale on a log axis, skipped steps), drawn by gnuplot into a PNG or SVG file.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace mixprec::train {

/// One training step as the plot shows it.
struct StepPoint {
    std::int64_t step; ///< steps done so far, this one included (skipped ones count)
    double loss;       ///< the batch loss; non-finite values leave a gap
    double loss_scale; ///< the scale after the step; 1 when there is no loss scaling
    bool skipped;      ///< the loss scaler skipped the update (non-finite gradients)
};

/// One evaluation on the test split, at the end of an epoch.
struct EpochPoint {
    std::int64_t step;    ///< the last step of the epoch
    double test_accuracy; ///< a fraction in [0, 1]; drawn as a percentage
};

/// Draws `steps` and `epochs` into `out` with gnuplot, under `title`. The format follows the extension:
/// ".png" (gnuplot's pngcairo terminal, or its plain png one when gnuplot lacks cairo) or ".svg".
/// Panels, top to bottom: training loss, test accuracy (%), loss scale (log₂ axis, as a staircase),
/// skipped steps (cumulative count, each skip marked). An empty `epochs` leaves the accuracy panel empty
/// with a note; non-finite losses and non-positive scales are left out of their panels.
/// Errors: std::invalid_argument naming `out` when its extension is neither .png nor .svg, or when
/// `steps` is empty; std::runtime_error saying to install gnuplot-nox when gnuplot is not on the PATH,
/// and std::runtime_error with gnuplot's own message when it fails (e.g. `out`'s directory does not exist).
/// The data and script go through a temporary directory, removed before returning.
void write_plot(const std::filesystem::path& out, std::span<const StepPoint> steps, std::span<const EpochPoint> epochs,
                const std::string& title);

} // namespace mixprec::train
