#pragma once
/// What the trainer's pictures (plot.hpp, telemetry_plot.hpp) share: the format from the file's extension,
/// a scratch directory for the data and the script, gnuplot's quoting and terminal, and running gnuplot
/// with its failures reported. Every message starts with `caller` ("write_plot: ...").

#include <filesystem>
#include <ostream>
#include <string>

namespace mixprec::train::detail {

/// True for ".svg", false for ".png"; std::invalid_argument naming `out` for any other extension.
bool plot_is_svg(const std::filesystem::path& out);

/// A fresh private directory under the system's temporary directory, removed with its contents;
/// std::runtime_error when it cannot be made.
class ScratchDir {
  public:
    explicit ScratchDir(const std::string& caller);
    ~ScratchDir();
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    const std::filesystem::path& path() const { return path_; }

  private:
    std::filesystem::path path_;
};

/// A gnuplot single-quoted string: a quote inside is doubled, control characters become spaces.
std::string gnuplot_string(const std::string& text);

/// A number for a data file: "NaN" (which gnuplot leaves out) for non-finite values.
void write_number(std::ostream& os, double v);

/// The script's first lines for a `width` × `height` picture: the svg terminal, or pngcairo (gnuplot's plain
/// png terminal when it lacks cairo).
std::string gnuplot_terminal(bool svg, int width, int height);

/// Writes `script` to `script_file` and runs gnuplot on it (its messages go to a log beside the script);
/// std::runtime_error saying to install gnuplot-nox when gnuplot is not on the PATH, with gnuplot's own
/// message when it fails, and when it exits normally without drawing anything into `out`.
void run_gnuplot(const std::string& caller, const std::filesystem::path& out, const std::filesystem::path& script_file,
                 const std::string& script);

} // namespace mixprec::train::detail
