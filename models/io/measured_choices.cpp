#include <mixprec/models/io/measured_choices.hpp>

#include <mixprec/models/io/detail/bytes.hpp>
#include <mixprec/models/io/files.hpp>

#include <set>

namespace mixprec::models {
namespace {

using detail::in_quotes;

constexpr std::string_view first_line = "# mixprec measured choices, format 1";

} // namespace

std::string choices_text(std::span<const autodiff::MeasuredChoice> choices) {
    std::string text(first_line);
    text += '\n';
    for (const autodiff::MeasuredChoice& c : choices) {
        if (const auto problem = autodiff::measured_choice_problem(c))
            throw std::invalid_argument("choices_text: the choice for " + in_quotes(c.key.substr(0, 200)) +
                                        " cannot be written: " + *problem);
        text += c.key + '\t' + c.chosen + '\n';
    }
    return text;
}

std::vector<autodiff::MeasuredChoice> parse_choices(std::string_view text) {
    std::vector<autodiff::MeasuredChoice> choices;
    std::set<std::string_view> keys;
    std::size_t number = 0;
    while (!text.empty()) {
        ++number;
        const std::size_t end = text.find('\n');
        const auto fail = [&](const std::string& why) -> void {
            throw choices_error("line " + std::to_string(number) + ": " + why);
        };
        if (end == std::string_view::npos) fail("the line does not end with a newline (is the file cut short?)");
        std::string_view line = text.substr(0, end);
        text.remove_prefix(end + 1);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (number == 1) {
            if (line != first_line) fail("not a mixprec choices file: the first line must be " + in_quotes(first_line));
            continue;
        }
        if (line.empty() || line.front() == '#') continue;
        const std::size_t tab = line.find('\t');
        if (tab == std::string_view::npos || line.find('\t', tab + 1) != std::string_view::npos)
            fail("a choice is a key and a name separated by exactly one tab");
        const std::string_view key = line.substr(0, tab), name = line.substr(tab + 1);
        autodiff::MeasuredChoice choice{std::string(key), std::string(name)};
        if (const auto problem = autodiff::measured_choice_problem(choice)) fail(*problem);
        if (!keys.insert(key).second) fail("the key " + in_quotes(key.substr(0, 200)) + " appears twice");
        choices.push_back(std::move(choice));
    }
    if (number == 0)
        throw choices_error("the text is empty (a choices file begins with " + in_quotes(first_line) + ")");
    return choices;
}

std::vector<autodiff::MeasuredChoice> read_choices_file(const std::filesystem::path& path) {
    const std::string where = "choices file " + in_quotes(path.string()) + ": ";
    try {
        const std::vector<std::uint8_t> bytes = read_file_bounded(path, max_choices_file_bytes);
        return parse_choices(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    } catch (const file_error& e) {
        throw choices_error(where + e.what());
    } catch (const choices_error& e) {
        throw choices_error(where + e.what());
    }
}

void write_choices_file(const std::filesystem::path& path, std::span<const autodiff::MeasuredChoice> choices) {
    const std::string text = choices_text(choices);
    try {
        write_file_atomically(path, std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
    } catch (const file_error& e) {
        throw choices_error("choices file " + in_quotes(path.string()) + ": " + e.what());
    }
}

} // namespace mixprec::models
