#pragma once
/// Keeps the thread pool at the cores other processes leave free.
///
/// mixprec's kernels, OpenBLAS and oneDNN share one OpenMP pool. Its workers spin for a while when they
/// wait (libgomp's default), which is what makes an idle machine fast; but when another process keeps a
/// core busy, every parallel region waits for the worker that shares that core, and the spinning workers
/// take time from it as well: a busy core then costs far more than its share (two threads on two cores
/// with one of them busy ran 4× slower than alone, one thread only 1.4×).
///
/// CoreShare measures, over windows of `window_seconds`, the CPU time spent busy on the CPUs this process
/// may run on (/proc/stat: user, nice, system, irq, softirq and steal, summed over the CPUs of its
/// affinity mask) minus this process's own (getrusage): the cores in use elsewhere. (A CPU quota set by
/// a container without an affinity mask is not seen: there, fix the count with set_blas_threads.) It sets the pool to the cores that leaves free, rounded
/// with some hysteresis — one thread fewer for each 0.35 of a core busy elsewhere, and back up only when
/// less than 0.2 of that core stays busy — never fewer than 1 nor more than `max_threads`. The first
/// measurement is taken by the constructor, which waits `first_window_seconds` for it (this process idle
/// meanwhile): the first steps of a run then already use the cores left free, where a pool of every core
/// with one of them busy ran up to 12× slower than one thread (an Intel Xeon with AMX, the mlp, float32).
/// Call update() often (once per training step, as the ShareCores callback of mixprec::models does): it
/// reads the two counters at most once per window and costs nothing otherwise.
///
/// The thread count changes how some float32 sums are split (see isa.hpp), so runs meant to give the
/// same bits should fix the thread count with set_blas_threads instead.

#include <chrono>
#include <cstdint>

namespace mixprec::autodiff {

struct CoreShareOptions {
    int max_threads = 0;         ///< the most threads to use; 0: every CPU this process may run on
    double window_seconds = 0.5; ///< how long each measurement of the other processes' load lasts
    /// How long the constructor measures before it returns (0: not at all; the pool then starts at
    /// max_threads until the first window ends). /proc/stat counts in ticks of 10 ms: 0.1 s sees a busy
    /// core as 10 ticks.
    double first_window_seconds = 0.1;
};

class CoreShare {
  public:
    explicit CoreShare(CoreShareOptions options = {});

    /// Re-measures if a window has passed and adjusts the pool; returns the threads in use.
    int update();

    int threads() const { return threads_; }
    /// Cores busy with other processes over the last window (0 before the first one ends, which is the
    /// constructor's unless first_window_seconds is 0, or when /proc/stat cannot be read: then the pool
    /// stays at max_threads).
    double busy_elsewhere() const { return busy_elsewhere_; }

    /// Threads to use with `cores` CPUs, `current` threads now and `busy` cores used elsewhere: the rule
    /// above, exposed for tests.
    static int choose(int cores, int current, double busy);

  private:
    struct Sample {
        std::chrono::steady_clock::time_point at;
        std::uint64_t machine_ticks = 0; ///< busy clock ticks of every CPU (0: unreadable)
        double own_seconds = 0;          ///< this process's user and system time
    };
    static Sample sample();
    /// Sets busy_elsewhere_ from the samples at the ends of a window and the pool from it.
    void measure(const Sample& from, const Sample& to);

    CoreShareOptions options_;
    int cores_;
    int threads_;
    double busy_elsewhere_ = 0;
    Sample last_;
};

} // namespace mixprec::autodiff
