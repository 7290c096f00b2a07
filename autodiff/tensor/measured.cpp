#include <mixprec/autodiff/tensor/detail/fastest.hpp>
#include <mixprec/autodiff/tensor/measured.hpp>

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

namespace mixprec::autodiff {
namespace {

struct entry {
    MeasuredChoice choice;
    std::string line;
};

struct measured_state {
    std::mutex mutex;
    std::vector<entry> entries;            // in the order made or first adopted
    std::map<std::string, std::size_t> at; // key → position in entries
};

measured_state& measured() {
    static measured_state state;
    return state;
}

/// The entry of `key`, made if there is none yet (with the lock held).
entry& entry_of(measured_state& s, const std::string& key) {
    const auto [it, added] = s.at.emplace(key, s.entries.size());
    if (added) s.entries.push_back({{key, {}}, {}});
    return s.entries[it->second];
}

/// The position of `name` among `names`, if it is there.
std::optional<std::size_t> position(const std::vector<std::string_view>& names, const std::string& name) {
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) return std::nullopt;
    return static_cast<std::size_t>(it - names.begin());
}

/// Not a control character: keys are text (UTF-8, "(128, 10)ᵀ"), never a tab or a line end.
bool text_byte(char c) {
    const auto b = static_cast<unsigned char>(c);
    return b >= 0x20 && b != 0x7f;
}

bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

} // namespace

std::optional<std::string> measured_choice_problem(const MeasuredChoice& choice) {
    const std::string& key = choice.key;
    if (key.empty()) return "the key is empty";
    if (key.size() > max_choice_key_bytes)
        return "the key has " + std::to_string(key.size()) + " bytes (at most " + std::to_string(max_choice_key_bytes) +
               ")";
    if (key.front() == '#') return "the key begins with '#'";
    if (!std::all_of(key.begin(), key.end(), text_byte))
        return "the key holds a control character (a tab, a line end, ...)";
    const std::string& name = choice.chosen;
    if (name.empty() || name.size() > max_choice_name_bytes || !std::all_of(name.begin(), name.end(), name_char))
        return "the name '" + name.substr(0, max_choice_name_bytes) + "' is not 1 to " +
               std::to_string(max_choice_name_bytes) + " letters, digits or '_'";
    return std::nullopt;
}

std::vector<std::string> measured_choices() {
    const std::lock_guard lock(measured().mutex);
    std::vector<std::string> lines;
    for (const entry& e : measured().entries) lines.push_back(e.line);
    return lines;
}

std::vector<MeasuredChoice> measured_choice_list() {
    const std::lock_guard lock(measured().mutex);
    std::vector<MeasuredChoice> list;
    for (const entry& e : measured().entries) list.push_back(e.choice);
    return list;
}

void adopt_measured_choices(std::span<const MeasuredChoice> choices) {
    for (const MeasuredChoice& c : choices)
        if (const auto problem = measured_choice_problem(c))
            throw std::invalid_argument("adopt_measured_choices: the choice for '" + c.key.substr(0, 200) +
                                        "': " + *problem);
    const std::lock_guard lock(measured().mutex);
    for (const MeasuredChoice& c : choices) {
        entry& e = entry_of(measured(), c.key);
        e.choice.chosen = c.chosen;
        e.line = c.key + ": " + c.chosen + ", adopted";
    }
}

void forget_measured_choices() {
    const std::lock_guard lock(measured().mutex);
    measured().entries.clear();
    measured().at.clear();
}

namespace detail {

std::optional<std::size_t> measured_choice(const std::string& key, const std::vector<std::string_view>& names) {
    const std::lock_guard lock(measured().mutex);
    const auto it = measured().at.find(key);
    if (it == measured().at.end()) return std::nullopt;
    return position(names, measured().entries[it->second].choice.chosen);
}

std::size_t record_measured_choice(const std::string& key, const std::vector<std::string_view>& names,
                                   std::size_t choice, std::string line) {
    const std::lock_guard lock(measured().mutex);
    entry& e = entry_of(measured(), key);
    if (const auto kept = position(names, e.choice.chosen)) return *kept; // chosen meanwhile
    e.choice.chosen = std::string(names[choice]);
    e.line = std::move(line);
    return choice;
}

} // namespace detail
} // namespace mixprec::autodiff
