// The trainer's plot: writes the run's data and a gnuplot script to a temporary directory, runs gnuplot
// on them with posix_spawnp, and reports its failures.

#include "plot.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace mixprec::train {

namespace fs = std::filesystem;

namespace {

/// A fresh private directory under the system's temporary directory, removed with its contents.
class ScratchDir {
  public:
    ScratchDir() {
        std::string pattern = (fs::temp_directory_path() / "mixprec-plot-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) {
            std::string message = "write_plot: cannot create a temporary directory: ";
            message += std::strerror(errno);
            throw std::runtime_error(message);
        }
        path_ = pattern;
    }
    ~ScratchDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    const fs::path& path() const { return path_; }

  private:
    fs::path path_;
};

/// A gnuplot single-quoted string: a quote inside is doubled, control characters become spaces.
std::string gnuplot_string(const std::string& text) {
    std::string out = "'";
    for (const char c : text) {
        if (c == '\'') out += '\'';
        out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
    }
    out += '\'';
    return out;
}

/// A number for the data file: "NaN" (which gnuplot leaves out) for non-finite values.
void write_number(std::ostream& os, double v) {
    if (std::isfinite(v))
        os << v;
    else
        os << "NaN";
}

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
    if (svg) {
        s << "set terminal svg size 1000,1150 dynamic font 'sans,12' background '#ffffff'\n";
    } else {
        s << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
             "    set terminal pngcairo size 1000,1150 font 'sans,11' background '#ffffff'\n"
             "} else {\n"
             "    set terminal png size 1000,1150\n"
             "}\n";
    }
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

/// Runs `gnuplot script`, its output and errors going to `log`; returns the exit status.
int run_gnuplot(const fs::path& script_file, const fs::path& log) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    std::string program = "gnuplot", argument = script_file.string();
    char* argv[] = {program.data(), argument.data(), nullptr};
    pid_t pid = 0;
    const int spawned = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    if (spawned == ENOENT)
        throw std::runtime_error("write_plot: gnuplot is not installed (or not on the PATH); install it with: "
                                 "sudo apt-get install gnuplot-nox");
    if (spawned != 0) {
        std::string message = "write_plot: cannot run gnuplot: ";
        message += std::strerror(spawned);
        throw std::runtime_error(message);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) throw std::runtime_error("write_plot: lost track of gnuplot");
    return status;
}

std::string read_text(const fs::path& file, std::size_t limit) {
    std::ifstream is(file);
    std::string text(limit, '\0');
    is.read(text.data(), static_cast<std::streamsize>(limit));
    text.resize(static_cast<std::size_t>(is.gcount()));
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return text;
}

} // namespace

void write_plot(const fs::path& out, std::span<const StepPoint> steps, std::span<const EpochPoint> epochs,
                const std::string& title) {
    const fs::path ext = out.extension();
    if (ext != ".png" && ext != ".svg") {
        std::string message = "plot file '";
        message += out.string();
        message += "': cannot tell the format from its extension '";
        message += ext.string();
        message += "'; use .png or .svg";
        throw std::invalid_argument(message);
    }
    if (steps.empty()) {
        std::string message = "plot file '";
        message += out.string();
        message += "': no training steps to plot";
        throw std::invalid_argument(message);
    }

    const ScratchDir scratch;
    const fs::path data = scratch.path() / "run.dat", script_file = scratch.path() / "run.gp";
    const fs::path log = scratch.path() / "gnuplot.log";
    write_data(data, steps, epochs);
    {
        std::ofstream os(script_file);
        os << script(out, ext == ".svg", data, steps, epochs, title);
        if (!os) {
            std::string message = "write_plot: cannot write the gnuplot script ";
            message += script_file.string();
            throw std::runtime_error(message);
        }
    }
    const int status = run_gnuplot(script_file, log);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        throw std::runtime_error("write_plot: gnuplot could not be started; install it with: "
                                 "sudo apt-get install gnuplot-nox");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::string message = "write_plot: gnuplot failed to draw '";
        message += out.string();
        message += "' (";
        message += WIFEXITED(status) ? "exit status " : "killed by signal ";
        message += std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        message += "): ";
        message += read_text(log, 2000);
        throw std::runtime_error(message);
    }
    std::error_code ec;
    if (fs::file_size(out, ec) == 0 || ec) {
        std::string message = "write_plot: gnuplot exited normally but wrote nothing to '";
        message += out.string();
        message += "': ";
        message += read_text(log, 2000);
        throw std::runtime_error(message);
    }
}

} // namespace mixprec::train
