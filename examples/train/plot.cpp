// The trainer's plot: writes the run's data and a gnuplot script to a temporary directory and runs gnuplot
// on them (detail/gnuplot.hpp).

#include "plot.hpp"

#include "detail/gnuplot.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string>

namespace mixprec::train {

namespace fs = std::filesystem;
using detail::gnuplot_string;
using detail::write_number;

namespace {

/// Two data blocks, which the script selects with `index`: 0 has one line per step
/// (step, loss, loss scale, 1 if skipped, skips so far), 1 one line per evaluation (step, accuracy %).
void write_data(const fs::path& file, std::span<const StepPoint> steps, std::span<const EpochPoint> epochs) {
    std::ofstream os(file);
    os << std::setprecision(9);
    std::int64_t skips = 0;
    for (const StepPoint& p : steps) {
        skips += p.skipped ? 1 : 0;
        os << p.step << ' ';
        write_number(os, p.loss);
        os << ' ';
        write_number(os, p.loss_scale > 0 ? p.loss_scale : NAN);
        os << ' ' << (p.skipped ? 1 : 0) << ' ' << skips << '\n';
    }
    os << "\n\n";
    for (const EpochPoint& e : epochs) {
        os << e.step << ' ';
        write_number(os, 100 * e.test_accuracy);
        os << '\n';
    }
    if (epochs.empty()) os << "0 NaN\n"; // gnuplot needs the block to exist
    os.flush();
    if (!os) {
        std::string message = "write_plot: cannot write the data file ";
        message += file.string();
        throw std::runtime_error(message);
    }
}

std::string script(const fs::path& out, bool svg, const fs::path& data, std::span<const StepPoint> steps,
                   std::span<const EpochPoint> epochs, const std::string& title) {
    std::int64_t first = steps.front().step, last = steps.front().step, skips = 0;
    for (const StepPoint& p : steps) {
        first = std::min(first, p.step);
        last = std::max(last, p.step);
        skips += p.skipped ? 1 : 0;
    }
    for (const EpochPoint& e : epochs) last = std::max(last, e.step);
    double scale_low = INFINITY, scale_high = 0;
    for (const StepPoint& p : steps)
        if (p.loss_scale > 0 && std::isfinite(p.loss_scale)) {
            scale_low = std::min(scale_low, p.loss_scale);
            scale_high = std::max(scale_high, p.loss_scale);
        }
    if (scale_high == 0) scale_low = scale_high = 1; // no usable scale: draw an empty panel around 1
    const std::int64_t skip_tic = std::max<std::int64_t>(1, (skips + 4) / 5);
    // A short run would vanish as bare lines: mark its points too; integer steps get integer tics.
    const std::string marks = steps.size() <= 100 ? "points pt 7 ps 0.6" : "";
    const std::string lines = steps.size() <= 100 ? "linespoints pt 7 ps 0.6" : "lines";
    if (last == first) ++last; // a one-step run still needs an x range

    const std::string d = gnuplot_string(data.string());
    std::ostringstream s;
    s << detail::gnuplot_terminal(svg, 1000, 1150);
    s << "set output " << gnuplot_string(out.string()) << "\n"
      << "set xrange [" << first << ":" << last << "]\n"
      << "set grid xtics ytics lt 1 lc rgb '#c8c8c8' lw 0.5\n"
      << "set key top right opaque\n"
      << (last - first < 10 ? "set xtics 1\n" : "") << "set lmargin 12\nset rmargin 4\n"
      << "set multiplot layout 4,1 title " << gnuplot_string(title) << " noenhanced"
      << " margins 0.10,0.97,0.06,0.94 spacing 0,0.025\n"
      << "set format x ''\n"
      // 1. training loss
      << "set ylabel 'training loss'\n"
      << "plot " << d << " index 0 using 1:2 with " << lines
      << " lw 1 lc rgb '#1f77b4' title 'batch loss'\n"
      // 2. test accuracy
      << "set ylabel 'test accuracy (%)'\n";
    if (epochs.empty()) s << "set label 1 'no test evaluation' at graph 0.5,0.5 center\nset yrange [0:100]\n";
    s << "set key bottom right\n"
      << "plot " << d << " index 1 using 1:2 with linespoints pt 7 ps 0.8 lw 2 lc rgb '#2ca02c' title 'end of epoch'\n"
      << "unset label 1\nset key top right\n"
      // 3. loss scale, as a staircase on a log2 axis
      << "set ylabel 'loss scale'\n"
      << "set logscale y 2\nset format y '2^{%L}'\n"
      << "set yrange [" << scale_low / 1.5 << ":" << scale_high * 1.5 << "]\n"
      << "plot " << d << " index 0 using 1:3 with steps lw 2 lc rgb '#9467bd' title 'scale after the step'";
    if (!marks.empty()) s << ", '' index 0 using 1:3 with " << marks << " lc rgb '#9467bd' notitle";
    s << "\n"
      << "unset logscale y\nset format y '%g'\n"
      // 4. skipped steps: cumulative count, each skip marked
      << "set ylabel 'skipped steps'\n"
      << "set yrange [0:" << std::max<std::int64_t>(1, skips) * 1.15 << "]\n"
      << "set ytics " << skip_tic << "\n"
      << "set format x '%g'\nset xlabel 'step'\n"
      << "plot " << d << " index 0 using 1:5 with steps lw 2 lc rgb '#d62728' title 'skipped so far (" << skips
      << ")', \\\n     " << d << " index 0 using 1:($4 > 0 ? $5 : NaN) with points pt 2 ps 1 lc rgb '#d62728' notitle\n"
      << "unset multiplot\n"
      << "set output\n";
    return s.str();
}

} // namespace

void write_plot(const fs::path& out, std::span<const StepPoint> steps, std::span<const EpochPoint> epochs,
                const std::string& title) {
    const bool svg = detail::plot_is_svg(out);
    if (steps.empty()) {
        std::string message = "plot file '";
        message += out.string();
        message += "': no training steps to plot";
        throw std::invalid_argument(message);
    }

    const detail::ScratchDir scratch("write_plot");
    const fs::path data = scratch.path() / "run.dat";
    write_data(data, steps, epochs);
    detail::run_gnuplot("write_plot", out, scratch.path() / "run.gp", script(out, svg, data, steps, epochs, title));
}

} // namespace mixprec::train
