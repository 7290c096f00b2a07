#include <mixprec/autodiff/tensor/detail/fastest.hpp>
#include <mixprec/autodiff/tensor/measured.hpp>

#include <map>
#include <mutex>

namespace mixprec::autodiff {
namespace {

struct measured_state {
    std::mutex mutex;
    std::map<std::string, std::size_t> chosen;
    std::vector<std::string> lines;
};

measured_state& measured() {
    static measured_state state;
    return state;
}

} // namespace

std::vector<std::string> measured_choices() {
    const std::lock_guard lock(measured().mutex);
    return measured().lines;
}

namespace detail {

std::optional<std::size_t> measured_choice(const std::string& key) {
    const std::lock_guard lock(measured().mutex);
    const auto it = measured().chosen.find(key);
    if (it == measured().chosen.end()) return std::nullopt;
    return it->second;
}

std::size_t record_measured_choice(const std::string& key, std::size_t choice, std::string line) {
    const std::lock_guard lock(measured().mutex);
    const auto [it, added] = measured().chosen.emplace(key, choice);
    if (added) measured().lines.push_back(std::move(line));
    return it->second;
}

} // namespace detail
} // namespace mixprec::autodiff
