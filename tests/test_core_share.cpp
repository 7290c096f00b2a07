// CoreShare: the thread count it chooses from the load other processes put on the machine, and that it
// sees a process that keeps a core busy, from its constructor on.
#define BOOST_TEST_MODULE core_share
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <thread>

using mixprec::autodiff::CoreShare;

BOOST_AUTO_TEST_CASE(one_thread_fewer_per_busy_core_with_hysteresis) {
    BOOST_TEST(CoreShare::choose(2, 2, 0.0) == 2);
    BOOST_TEST(CoreShare::choose(2, 2, 0.34) == 2); // below 0.35 of a core: no change
    BOOST_TEST(CoreShare::choose(2, 2, 0.5) == 1);
    BOOST_TEST(CoreShare::choose(2, 2, 1.0) == 1);
    BOOST_TEST(CoreShare::choose(2, 2, 7.0) == 1); // never fewer than one
    BOOST_TEST(CoreShare::choose(2, 1, 0.3) == 1); // back up only below 0.2
    BOOST_TEST(CoreShare::choose(2, 1, 0.19) == 2);
    BOOST_TEST(CoreShare::choose(8, 8, 2.0) == 6);
    BOOST_TEST(CoreShare::choose(8, 8, 1.1) == 7);
    BOOST_TEST(CoreShare::choose(8, 7, 1.4) == 6); // a second thread fewer from 1.35
    BOOST_TEST(CoreShare::choose(8, 6, 1.3) == 6); // and back only below 1.2
    BOOST_TEST(CoreShare::choose(8, 6, 1.1) == 7);
}

BOOST_AUTO_TEST_CASE(bad_options_are_refused) {
    BOOST_CHECK_THROW(CoreShare({.max_threads = -1}), std::invalid_argument);
    BOOST_CHECK_THROW(CoreShare({.window_seconds = 0}), std::invalid_argument);
    BOOST_CHECK_THROW(CoreShare({.first_window_seconds = -1}), std::invalid_argument);
}

/// A child process that keeps a core busy until the returned guard ends it.
struct BusyChild {
    pid_t pid = fork();
    BusyChild() {
        BOOST_REQUIRE(pid >= 0);
        if (pid == 0) {
            volatile unsigned long spin = 0;
            for (;;) spin = spin + 1; // until killed
        }
    }
    ~BusyChild() {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
    }
};

BOOST_AUTO_TEST_CASE(the_constructor_measures_before_the_first_step) {
    const int cores = CoreShare({.first_window_seconds = 0}).threads();
    if (cores < 2) return; // one usable core: there is nothing to give up
    BusyChild busy;
    std::this_thread::sleep_for(std::chrono::milliseconds(50)); // the child running
    const CoreShare share({.first_window_seconds = 0.3});
    BOOST_TEST_MESSAGE("busy elsewhere: " << share.busy_elsewhere() << " cores; threads " << share.threads());
    BOOST_TEST(share.busy_elsewhere() >= 0.4); // most of a core, unless the machine is oversubscribed
    BOOST_TEST(share.threads() < cores);
}

BOOST_AUTO_TEST_CASE(sees_another_process_keep_a_core_busy) {
    CoreShare share({.window_seconds = 0.4});
    const int before = share.threads();
    if (before < 2) return; // one usable core: there is nothing to give up
    {
        BusyChild busy;
        // Measure while this process sleeps: whatever the machine is busy with is another process's.
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
        while (std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            share.update();
        }
    }
    BOOST_TEST_MESSAGE("busy elsewhere: " << share.busy_elsewhere() << " cores; threads " << share.threads());
    // The child alone keeps most of a core busy (less only if the machine is oversubscribed).
    BOOST_TEST(share.busy_elsewhere() >= 0.4);
    BOOST_TEST(share.threads() < before);
}
