#include <mixprec/autodiff/detail/conv_routes.hpp>
#include <mixprec/autodiff/ops_conv.hpp>
#include <mixprec/autodiff/tensor/detail/env_choice.hpp>

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace mixprec::autodiff {
namespace {

constexpr std::array<std::pair<ConvBackend, std::string_view>, 5> names{{{ConvBackend::automatic, "automatic"},
                                                                         {ConvBackend::im2col, "im2col"},
                                                                         {ConvBackend::im2col_onednn, "im2col_onednn"},
                                                                         {ConvBackend::onednn, "onednn"},
                                                                         {ConvBackend::measured, "measured"}}};

/// The process's route for ConvBackend::automatic, read from MIXPREC_CONV_ROUTE at first use.
std::atomic<ConvBackend>& process_backend() {
    static std::atomic<ConvBackend> backend{
        detail::env_choice("MIXPREC_CONV_ROUTE", ConvBackend::automatic, conv_backend_named)};
    return backend;
}

struct measured_routes {
    std::mutex mutex;
    std::map<std::string, ConvBackend> chosen;
    std::vector<std::string> lines;
};

measured_routes& measured() {
    static measured_routes state;
    return state;
}

} // namespace

std::string_view name_of(ConvBackend backend) {
    for (const auto& [b, name] : names)
        if (b == backend) return name;
    return "?";
}

ConvBackend conv_backend_named(std::string_view name) {
    std::string choices;
    for (const auto& [b, n] : names) {
        if (n == name) return b;
        choices += (choices.empty() ? "" : ", ") + std::string(n);
    }
    throw std::invalid_argument("no convolution route is called '" + std::string(name) + "' (the routes: " + choices +
                                ")");
}

ConvBackend conv_backend() { return process_backend().load(std::memory_order_relaxed); }

void set_conv_backend(ConvBackend backend) { process_backend().store(backend, std::memory_order_relaxed); }

std::vector<std::string> measured_conv_routes() {
    const std::lock_guard lock(measured().mutex);
    return measured().lines;
}

namespace detail {

std::optional<ConvBackend> measured_choice(const std::string& key) {
    const std::lock_guard lock(measured().mutex);
    const auto it = measured().chosen.find(key);
    if (it == measured().chosen.end()) return std::nullopt;
    return it->second;
}

ConvBackend record_measured_choice(const std::string& key, ConvBackend backend, std::string line) {
    const std::lock_guard lock(measured().mutex);
    const auto [it, added] = measured().chosen.emplace(key, backend);
    if (added) measured().lines.push_back(std::move(line));
    return it->second;
}

} // namespace detail
} // namespace mixprec::autodiff
