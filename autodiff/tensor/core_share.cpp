#include <mixprec/autodiff/tensor/core_share.hpp>

#include <mixprec/autodiff/tensor/kernels_matmul.hpp>

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

namespace mixprec::autodiff {
namespace {

/// The CPUs this process may run on (all online CPUs when the mask cannot be read).
cpu_set_t usable_set() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) == 0) {
        const long online = sysconf(_SC_NPROCESSORS_ONLN);
        for (long c = 0; c < std::max(online, 1L) && c < CPU_SETSIZE; ++c) CPU_SET(static_cast<int>(c), &set);
    }
    return set;
}

int usable_cpus() {
    const cpu_set_t set = usable_set();
    return std::max(1, CPU_COUNT(&set));
}

/// Busy clock ticks summed over the CPUs this process may run on, from /proc/stat's per-CPU lines (load
/// on CPUs it may not use costs it nothing); 0 when they cannot be read.
std::uint64_t machine_busy_ticks() {
    const cpu_set_t usable = usable_set();
    std::ifstream in("/proc/stat");
    std::string line;
    std::uint64_t busy = 0;
    bool seen = false;
    while (std::getline(in, line)) {
        if (line.rfind("cpu", 0) != 0) {
            if (seen) break; // the per-CPU lines come first, together
            continue;
        }
        std::istringstream fields(line);
        std::string name;
        std::uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
        if (!(fields >> name >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal)) return 0;
        if (name == "cpu") continue; // the machine's total
        const int cpu = std::atoi(name.c_str() + 3);
        if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &usable)) continue;
        busy += user + nice + system + irq + softirq + steal;
        seen = true;
    }
    return seen ? busy : 0;
}

double own_cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    const auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
    return seconds(u.ru_utime) + seconds(u.ru_stime);
}

} // namespace

CoreShare::CoreShare(CoreShareOptions options) : options_(options), cores_(usable_cpus()) {
    if (options_.max_threads < 0)
        throw std::invalid_argument("CoreShare: max_threads must be 0 (every CPU) or more, got " +
                                    std::to_string(options_.max_threads));
    if (!(options_.window_seconds > 0))
        throw std::invalid_argument("CoreShare: window_seconds must be positive, got " +
                                    std::to_string(options_.window_seconds));
    if (!(options_.first_window_seconds >= 0))
        throw std::invalid_argument("CoreShare: first_window_seconds must be 0 or more, got " +
                                    std::to_string(options_.first_window_seconds));
    if (options_.max_threads == 0) options_.max_threads = cores_;
    threads_ = std::min(options_.max_threads, cores_);
    last_ = sample();
    if (options_.first_window_seconds > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double>(options_.first_window_seconds));
        const Sample s = sample();
        measure(last_, s);
        last_ = s;
    }
    set_blas_threads(threads_);
}

CoreShare::Sample CoreShare::sample() {
    return {std::chrono::steady_clock::now(), machine_busy_ticks(), own_cpu_seconds()};
}

int CoreShare::choose(int cores, int current, double busy) {
    const auto fewer = [&](double margin) { return static_cast<int>(std::ceil(std::max(0.0, busy - margin))); };
    const int down = cores - fewer(0.35), up = cores - fewer(0.2);
    if (down < current) return std::max(1, down);
    if (up > current) return std::max(1, up);
    return current;
}

void CoreShare::measure(const Sample& from, const Sample& to) {
    const double seconds = std::chrono::duration<double>(to.at - from.at).count();
    if (to.machine_ticks == 0 || from.machine_ticks == 0 || to.machine_ticks < from.machine_ticks || !(seconds > 0))
        return;
    static const double ticks_per_second = static_cast<double>(sysconf(_SC_CLK_TCK));
    const double machine = double(to.machine_ticks - from.machine_ticks) / ticks_per_second;
    busy_elsewhere_ = std::max(0.0, (machine - (to.own_seconds - from.own_seconds)) / seconds);
    threads_ = std::min(options_.max_threads, choose(cores_, threads_, busy_elsewhere_));
}

int CoreShare::update() {
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_.at).count() < options_.window_seconds) return threads_;
    const Sample s = sample();
    const int before = threads_;
    measure(last_, s);
    if (threads_ != before) set_blas_threads(threads_);
    last_ = s;
    return threads_;
}

} // namespace mixprec::autodiff
