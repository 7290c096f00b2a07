// The telemetry picture: groups the entries by layer, writes the histograms and underflow shares to a
// temporary directory with a gnuplot script that places every panel itself, and runs gnuplot on them.

#include "telemetry_plot.hpp"

#include "detail/gnuplot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <stdexcept>

namespace mixprec::train {

namespace fs = std::filesystem;
using autodiff::RoundingStats;
using detail::gnuplot_string;
using detail::write_number;

namespace {

constexpr std::array<const char*, 10> palette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                                 "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
constexpr std::array<const char*, 4> band_colors = {"#f6c6c2", "#fce3b4", "#e3f1dc", "#dccbe8"};
constexpr int weights = 0, outputs = 1; // the two rows of histograms, and the two underflow panels

/// A point's telemetry by layer: stats[row][i] is the sum of layer i's entries of that kind (count 0: none).
struct Grouped {
    std::int64_t step;
    double scale;
    std::array<std::vector<RoundingStats>, 2> stats;
};

/// Layer i's color, the same in every panel.
std::string color(std::size_t i) { return std::string("rgb '") + palette[i % palette.size()] + "'"; }

bool has_histogram(const RoundingStats& s) { return s.exponent_histogram.size() == RoundingStats::histogram_bins; }

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// The layer a variable belongs to: the longest of `called` (the layers with output gradients) that its name
/// starts with, followed by '/'; else its name up to the last '/' (all of it when there is none).
std::string layer_of(const std::string& variable, std::span<const std::string> called) {
    std::string layer;
    for (const std::string& c : called)
        if (c.size() > layer.size() && variable.size() > c.size() && variable.compare(0, c.size(), c) == 0 &&
            variable[c.size()] == '/')
            layer = c;
    if (!layer.empty()) return layer;
    const std::size_t slash = variable.rfind('/');
    return slash == std::string::npos ? variable : variable.substr(0, slash);
}

/// The layers in the order of their output gradients (the order of the model's calls), then those that only
/// have variables; and every point with telemetry grouped by them.
std::vector<Grouped> group(std::span<const TelemetryPoint> points, std::vector<std::string>& layers) {
    const auto index = [&](const std::string& layer) {
        const auto it = std::find(layers.begin(), layers.end(), layer);
        if (it != layers.end()) return std::size_t(it - layers.begin());
        layers.push_back(layer);
        return layers.size() - 1;
    };
    const std::string output = "/output_grad";
    for (const TelemetryPoint& p : points)
        if (p.telemetry)
            for (const auto& [name, s] : p.telemetry->entries())
                if (ends_with(name, output)) index(name.substr(0, name.size() - output.size()));
    const std::vector<std::string> called = layers;
    std::vector<Grouped> grouped;
    for (const TelemetryPoint& p : points) {
        if (!p.telemetry) continue;
        Grouped g{p.step, p.loss_scale, {}};
        for (const auto& [name, s] : p.telemetry->entries()) {
            // FP8 casts are in other formats than the ranges drawn
            if (ends_with(name, "/forward") || ends_with(name, "/backward") || name.find("/fp8_") != name.npos)
                continue;
            const bool is_output = ends_with(name, output);
            const std::size_t i =
                index(is_output ? name.substr(0, name.size() - output.size()) : layer_of(name, called));
            for (auto& row : g.stats) row.resize(layers.size());
            g.stats[is_output ? outputs : weights][i] += s;
        }
        grouped.push_back(std::move(g));
    }
    for (Grouped& g : grouped)
        for (auto& row : g.stats) row.resize(layers.size());
    return grouped;
}

/// log₂ of the loss scale, or 0 when it is not a usable scale.
double log2_scale(double scale) { return scale > 0 && std::isfinite(scale) ? std::log2(scale) : 0; }

/// "2^{15}" for powers of two above 1, else the number.
std::string scale_text(double scale) {
    char text[48];
    const double k = log2_scale(scale);
    if (k == std::round(k) && scale > 1)
        std::snprintf(text, sizeof text, "2^{%.0f}", k);
    else
        std::snprintf(text, sizeof text, "%g", scale);
    return text;
}

/// The points whose histograms are drawn: the first with histograms, the middle one of those and the last.
std::vector<std::size_t> chosen_points(const std::vector<Grouped>& grouped) {
    std::vector<std::size_t> with;
    for (std::size_t k = 0; k < grouped.size(); ++k)
        for (const auto& row : grouped[k].stats)
            if (std::any_of(row.begin(), row.end(), has_histogram) && (with.empty() || with.back() != k))
                with.push_back(k);
    if (with.size() <= 3) return with;
    return {with.front(), with[(with.size() - 1) / 2], with.back()};
}

/// What the histogram panels share: the x range (log₂|g|) and the y range (% of values, log axis).
struct HistogramRanges {
    double x_low = INFINITY, x_high = -INFINITY, y_low = 100;
};

HistogramRanges histogram_ranges(const std::vector<Grouped>& grouped, const std::vector<std::size_t>& chosen,
                                 const autodiff::RoundingThresholds& t) {
    HistogramRanges r;
    for (const std::size_t k : chosen)
        for (const auto& row : grouped[k].stats)
            for (const RoundingStats& s : row) {
                if (!has_histogram(s)) continue;
                for (int e = 1; e < 255; ++e) {
                    if (s.exponent_histogram[e] == 0) continue;
                    const double x = e - 127, shift = log2_scale(grouped[k].scale);
                    r.x_low = std::min({r.x_low, x, x - shift});
                    r.x_high = std::max({r.x_high, x + 1, x + 1 - shift});
                    r.y_low = std::min(r.y_low, 100.0 * double(s.exponent_histogram[e]) / double(s.count));
                }
            }
    if (r.x_low > r.x_high) r = {-10, 10, 1}; // histograms with nothing but zeros
    // Bring the format's boundaries in when they are near the data, so that the margin to them shows.
    for (const float f : {t.underflow_max, t.normal_min, t.overflow_min}) {
        const double x = std::log2(double(f));
        if (std::isfinite(x) && x > r.x_low - 16 && x < r.x_high + 16)
            r.x_low = std::min(r.x_low, x - 1), r.x_high = std::max(r.x_high, x + 1);
    }
    r.x_low = std::floor(r.x_low - 1), r.x_high = std::ceil(r.x_high + 1);
    r.y_low = std::clamp(std::pow(10.0, std::floor(std::log10(r.y_low))), 1e-6, 0.1);
    return r;
}

/// Block 0: one line per point (step, loss scale, the underflow % of each layer's weights, then of its
/// output gradient). Then one block per chosen point, row and layer: the staircase (log₂|g| as rounded,
/// % of values, log₂|g| before the scale), closed at `floor` on both sides.
void write_data(const fs::path& file, const std::vector<Grouped>& grouped, const std::vector<std::size_t>& chosen,
                double floor) {
    std::ofstream os(file);
    os << std::setprecision(9);
    for (const Grouped& g : grouped) {
        os << g.step << ' ';
        write_number(os, g.scale > 0 ? g.scale : NAN);
        for (const auto& row : g.stats)
            for (const RoundingStats& s : row) {
                os << ' ';
                write_number(os, s.count > 0 ? 100.0 * double(s.underflow) / double(s.count) : NAN);
            }
        os << '\n';
    }
    for (const std::size_t k : chosen)
        for (const auto& row : grouped[k].stats)
            for (const RoundingStats& s : row) {
                os << "\n\n";
                int low = 1, high = has_histogram(s) ? 254 : 0; // float32's normal exponents
                while (low <= high && s.exponent_histogram[low] == 0) ++low;
                while (high >= low && s.exponent_histogram[high] == 0) --high;
                if (low > high) {
                    os << "NaN NaN NaN\n"; // gnuplot needs the block to exist
                    continue;
                }
                const double shift = log2_scale(grouped[k].scale);
                const auto line = [&](int e, double share) {
                    os << e - 127 << ' ' << std::max(share, floor) << ' ' << e - 127 - shift << '\n';
                };
                line(low, 0);
                for (int e = low; e <= high; ++e) line(e, 100.0 * double(s.exponent_histogram[e]) / double(s.count));
                line(high + 1, 0);
            }
    os.flush();
    if (!os) throw std::runtime_error("write_telemetry_plot: cannot write the data file " + file.string());
}

/// The entries of the key: each layer's color, the line styles, the format's ranges (with histograms).
std::string key_entries(const std::vector<std::string>& layers, bool histograms, autodiff::Dtype format) {
    const autodiff::RoundingThresholds& t = autodiff::rounding_thresholds(format);
    const auto log2_text = [](float f) {
        char text[32];
        std::snprintf(text, sizeof text, "%.3g", std::log2(double(f)));
        return std::string(text);
    };
    const std::string next = ", \\\n     ", blank = "keyentry with lines lc rgb '#ffffff' title ' '";
    std::string s;
    for (std::size_t i = 0; i < layers.size(); ++i)
        s += "keyentry with lines lw 2.5 lc " + color(i) + " title " + gnuplot_string(layers[i]) + " noenhanced" + next;
    s += blank + next;
    if (histograms)
        s += "keyentry with lines lw 2 lc rgb '#333333' title 'as rounded (× loss scale)'" + next +
             "keyentry with lines lw 1.2 dt 2 lc rgb '#333333' title 'before the loss scale'" + next;
    s += "keyentry with lines lw 1.5 lc rgb '#999999' title 'loss scale (right axis)'";
    if (!histograms) return s;
    s += next + blank + next + "keyentry with lines lc rgb '#ffffff' title " +
         gnuplot_string(std::string(name_of(format)) + " range:") + " noenhanced";
    const std::string band_titles[] = {
        t.underflow_max > 0 ? "lost (→ 0): log_2|g| ≤ " + log2_text(t.underflow_max) : "",
        "subnormal: log_2|g| < " + log2_text(t.normal_min), "normal",
        std::isfinite(t.overflow_min) ? "overflow: log_2|g| ≥ " + log2_text(t.overflow_min) : ""};
    for (int band = 0; band < 4; ++band)
        if (!band_titles[band].empty())
            s += next + "keyentry with boxes fc rgb '" + band_colors[band] + "' fs solid 1.0 noborder title " +
                 gnuplot_string(band_titles[band]);
    return s;
}

/// What the script's panels read, and where they go: in pixels from the top left, two rows of histograms
/// (one column per chosen point) over the two underflow panels, the key in a column at the right.
struct Figure {
    std::vector<std::string> layers;
    std::vector<Grouped> grouped;
    std::vector<std::size_t> chosen;
    HistogramRanges ranges;
    autodiff::Dtype format;
    std::string data; // the data file, quoted for gnuplot
    int left = 105, grid = 1260, width = 0, height = 0;
    int hist_top = 90, hist_row = 0, hist_gap = 16, hist_bottom = 0, under_top = 0, under_bottom = 0;

    Figure(std::span<const TelemetryPoint> points, autodiff::Dtype f) : format(f) {
        grouped = group(points, layers);
        chosen = chosen_points(grouped);
        ranges = histogram_ranges(grouped, chosen, autodiff::rounding_thresholds(format));
        std::size_t longest = 0;
        for (const std::string& l : layers) longest = std::max(longest, l.size());
        width = grid + std::max(270, 70 + 7 * int(longest));
        hist_row = chosen.empty() ? 60 : 250, hist_bottom = hist_top + 2 * hist_row + hist_gap;
        under_top = hist_bottom + (chosen.empty() ? 50 : 110), under_bottom = under_top + 260;
        height = under_bottom + 65;
    }

    /// `set lmargin/rmargin/bmargin/tmargin at screen`: a panel's plot area, in pixels from the top left.
    std::string area(double l, double r, double top, double bottom) const {
        std::ostringstream s;
        s << "set lmargin at screen " << l / width << "; set rmargin at screen " << r / width
          << "\nset tmargin at screen " << 1 - top / height << "; set bmargin at screen " << 1 - bottom / height
          << "\n";
        return s.str();
    }
};

/// Top: the histograms of the chosen points against the format's ranges, or a note when there are none.
void histogram_panels(std::ostream& s, const Figure& f) {
    const HistogramRanges& r = f.ranges;
    const autodiff::RoundingThresholds& t = autodiff::rounding_thresholds(f.format);
    if (f.chosen.empty())
        s << f.area(f.left, f.grid - 20, f.hist_top, f.hist_bottom)
          << "unset border; unset tics; set xrange [0:1]; set yrange [0:1]\n"
          << "set label 1 'No exponent histograms in this telemetry (record them with "
             "FitOptions::telemetry_histogram): the underflow shares below only.' at 0.5,0.5 center noenhanced\n"
          << "plot NaN notitle\nunset label 1\nset border; set tics\n";
    const double bounds[] = {r.x_low, std::log2(double(t.underflow_max)), std::log2(double(t.normal_min)),
                             std::log2(double(t.overflow_min)), r.x_high};
    const double span = r.x_high - r.x_low, column = double(f.grid - f.left - 20) / double(f.chosen.size());
    for (std::size_t c = 0; c < f.chosen.size(); ++c) {
        const Grouped& g = f.grouped[f.chosen[c]];
        s << "set xrange [" << r.x_low << ":" << r.x_high << "]\nset logscale y 10\nset yrange [" << r.y_low
          << ":100]\nset xtics "
          << (span > 40   ? 10
              : span > 16 ? 5
                          : 2)
          << "\nset mxtics\n";
        for (int band = 0; band < 4; ++band) {
            const double lo = std::clamp(bounds[band], r.x_low, r.x_high);
            const double hi = std::clamp(bounds[band + 1], r.x_low, r.x_high);
            if (hi > lo) // also false for NaN
                s << "set object " << band + 1 << " rectangle from first " << lo << ", graph 0 to first " << hi
                  << ", graph 1 behind fc rgb '" << band_colors[band] << "' fs solid 1.0 noborder\n";
        }
        for (const int row : {weights, outputs}) {
            const double top = f.hist_top + row * (f.hist_row + f.hist_gap), left = f.left + double(c) * column;
            s << f.area(left + (c > 0 ? 12 : 0), left + column - 12, top, top + f.hist_row);
            if (row == weights)
                s << "set title 'step " << g.step << " · loss scale " << scale_text(g.scale) << "'\n"
                  << "set format x ''\nunset xlabel\n";
            else
                s << "unset title\nset format x '2^{%g}'\nset xlabel 'log_2 |gradient| before rounding'\n";
            if (c == 0)
                s << "set format y '%g'\nset ylabel \"" << (row == weights ? "weight" : "output")
                  << " gradients\\n% of values per binade\"\n";
            else
                s << "set format y ''\nunset ylabel\n";
            std::string plots;
            for (std::size_t i = 0; i < f.layers.size(); ++i) {
                if (!has_histogram(g.stats[row][i])) continue;
                const std::string block = std::to_string(1 + (c * 2 + row) * f.layers.size() + i);
                plots += (plots.empty() ? "plot " : ", \\\n     ") + f.data + " index " + block +
                         " using 1:2 with steps lw 2 lc " + color(i);
                if (log2_scale(g.scale) != 0)
                    plots += ", \\\n     '' index " + block + " using 3:2 with steps lw 1.2 dt 2 lc " + color(i);
            }
            if (plots.empty())
                s << "set label 1 'no " << (row == weights ? "weight" : "output")
                  << " gradients with histograms' at graph 0.5,0.5 center\nplot NaN notitle\nunset label 1\n";
            else
                s << plots << "\n";
        }
        s << "unset object 1; unset object 2; unset object 3; unset object 4\n";
    }
}

/// Bottom: the underflow shares over training, the loss scale on the right axis, the chosen steps dotted.
void underflow_panels(std::ostream& s, const Figure& f) {
    std::int64_t first = f.grouped.front().step, last = first;
    double scale_low = INFINITY, scale_high = 0;
    std::array<double, 2> most = {0, 0};
    for (const Grouped& g : f.grouped) {
        first = std::min(first, g.step), last = std::max(last, g.step);
        if (g.scale > 0 && std::isfinite(g.scale))
            scale_low = std::min(scale_low, g.scale), scale_high = std::max(scale_high, g.scale);
        for (const int row : {weights, outputs})
            for (const RoundingStats& st : g.stats[row])
                if (st.count > 0) most[row] = std::max(most[row], 100.0 * double(st.underflow) / double(st.count));
    }
    if (scale_high == 0) scale_low = scale_high = 1;
    if (last == first) --first, ++last; // one point: in the middle
    const std::string marks = f.grouped.size() <= 60 ? "linespoints pt 7 ps 0.5" : "lines";
    s << "unset title; unset logscale y; unset ylabel\nset xrange [" << first << ":" << last << "]\n"
      << (last - first < 10 ? "set xtics 1\n" : "set xtics autofreq\n") << "set mxtics default\n"
      << "set format x '%g'\nset format y '%g'\nset xlabel 'step'\n"
      << "set logscale y2 2\nset format y2 '2^{%L}'\nset y2tics nomirror\nset ytics nomirror\n"
      << "set y2range [" << scale_low / 1.5 << ":" << scale_high * 1.5 << "]\n";
    for (std::size_t c = 0; c < f.chosen.size(); ++c) {
        const std::int64_t step = f.grouped[f.chosen[c]].step;
        s << "set arrow " << c + 1 << " from " << step << ", graph 0 to " << step
          << ", graph 1 nohead dt 3 lw 1.2 lc rgb '#555555' back\n";
    }
    const double half = double(f.grid - f.left - 20) / 2;
    const std::size_t n = f.layers.size();
    for (const int row : {weights, outputs}) {
        const double left = f.left + row * (half + 60);
        s << f.area(left, left + half - 60, f.under_top, f.under_bottom) << "set title '"
          << (row == weights ? "weight" : "output") << " gradients lost to underflow (% of each layer''s values)'\n"
          << "set yrange [0:" << (most[row] > 0 ? most[row] * 1.15 : 1) << "]\n"
          << (row == outputs ? "set y2label 'loss scale' offset -1,0\n" : "") << "plot " << f.data
          << " index 0 using 1:2 axes x1y2 with steps lw 1.5 lc rgb '#999999' notitle";
        for (std::size_t i = 0; i < n; ++i)
            if (std::any_of(f.grouped.begin(), f.grouped.end(),
                            [&](const Grouped& g) { return g.stats[row][i].count; }))
                s << ", \\\n     '' index 0 using 1:" << 3 + row * n + i << " with " << marks << " lw 1.8 lc "
                  << color(i) << " notitle";
        s << "\n";
    }
}

} // namespace

void write_telemetry_plot(const fs::path& out, std::span<const TelemetryPoint> points, autodiff::Dtype format,
                          const std::string& title) {
    const bool svg = detail::plot_is_svg(out);
    Figure f(points, format);
    if (f.grouped.empty()) throw std::invalid_argument("plot file '" + out.string() + "': no telemetry to plot");

    const detail::ScratchDir scratch("write_telemetry_plot");
    const fs::path data = scratch.path() / "telemetry.dat";
    write_data(data, f.grouped, f.chosen, f.ranges.y_low / 10);
    f.data = gnuplot_string(data.string());

    std::ostringstream s;
    s << std::setprecision(6) << detail::gnuplot_terminal(svg, f.width, f.height) << "set output "
      << gnuplot_string(out.string()) << "\nset multiplot title " << gnuplot_string(title) << " noenhanced font ',14'\n"
      << "set grid xtics ytics lt 1 lc rgb '#d0d0d0' lw 0.5\nset clip two\nunset key\n";
    histogram_panels(s, f);
    underflow_panels(s, f);
    // The key, in the column at the right, as an empty plot of its own (a key takes no more rows than its
    // plot's height holds).
    s << "unset border; unset tics; unset title; unset xlabel; unset y2label; unset arrow; unset logscale\n"
      << "set xrange [0:1]; set yrange [0:1]\n"
      << f.area(f.grid + 10, f.width - 5, f.hist_top, f.under_bottom)
      << "set key inside left top Left reverse samplen 2.5 spacing 1.2 title 'layers' left\nplot NaN notitle, \\\n     "
      << key_entries(f.layers, !f.chosen.empty(), format) << "\nunset multiplot\nset output\n";
    detail::run_gnuplot("write_telemetry_plot", out, scratch.path() / "telemetry.gp", s.str());
}

} // namespace mixprec::train
