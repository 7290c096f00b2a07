// Running gnuplot for the trainer's pictures: posix_spawnp with its output in a log, and the failures
// turned into messages.

#include "gnuplot.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace mixprec::train::detail {

namespace fs = std::filesystem;

namespace {

/// Runs `gnuplot script`, its output and errors going to `log`; returns the exit status.
int spawn_gnuplot(const std::string& caller, const fs::path& script_file, const fs::path& log) {
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
        throw std::runtime_error(caller + ": gnuplot is not installed (or not on the PATH); install it with: "
                                          "sudo apt-get install gnuplot-nox");
    if (spawned != 0) throw std::runtime_error(caller + ": cannot run gnuplot: " + std::strerror(spawned));
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) throw std::runtime_error(caller + ": lost track of gnuplot");
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

bool plot_is_svg(const fs::path& out) {
    const fs::path ext = out.extension();
    if (ext != ".png" && ext != ".svg") {
        std::string message = "plot file '";
        message += out.string();
        message += "': cannot tell the format from its extension '";
        message += ext.string();
        message += "'; use .png or .svg";
        throw std::invalid_argument(message);
    }
    return ext == ".svg";
}

ScratchDir::ScratchDir(const std::string& caller) {
    std::string pattern = (fs::temp_directory_path() / "mixprec-plot-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
        throw std::runtime_error(caller + ": cannot create a temporary directory: " + std::strerror(errno));
    path_ = pattern;
}

ScratchDir::~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
}

std::string gnuplot_string(const std::string& text) {
    std::string out = "'";
    for (const char c : text) {
        if (c == '\'') out += '\'';
        out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
    }
    out += '\'';
    return out;
}

void write_number(std::ostream& os, double v) {
    if (std::isfinite(v))
        os << v;
    else
        os << "NaN";
}

std::string gnuplot_terminal(bool svg, int width, int height) {
    const std::string size = std::to_string(width) + "," + std::to_string(height);
    if (svg) return "set terminal svg size " + size + " dynamic font 'sans,12' background '#ffffff'\n";
    return "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
           "    set terminal pngcairo size " +
           size +
           " font 'sans,11' background '#ffffff'\n"
           "} else {\n"
           "    set terminal png size " +
           size + "\n}\n";
}

void run_gnuplot(const std::string& caller, const fs::path& out, const fs::path& script_file,
                 const std::string& script) {
    {
        std::ofstream os(script_file);
        os << script;
        if (!os) throw std::runtime_error(caller + ": cannot write the gnuplot script " + script_file.string());
    }
    const fs::path log = script_file.parent_path() / "gnuplot.log";
    const int status = spawn_gnuplot(caller, script_file, log);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        throw std::runtime_error(caller + ": gnuplot could not be started; install it with: "
                                          "sudo apt-get install gnuplot-nox");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::string message = caller + ": gnuplot failed to draw '";
        message += out.string();
        message += "' (";
        message += WIFEXITED(status) ? "exit status " : "killed by signal ";
        message += std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        message += "): ";
        message += read_text(log, 2000);
        throw std::runtime_error(message);
    }
    std::error_code ec;
    if (fs::file_size(out, ec) == 0 || ec)
        throw std::runtime_error(caller + ": gnuplot exited normally but wrote nothing to '" + out.string() +
                                 "': " + read_text(log, 2000));
}

} // namespace mixprec::train::detail
