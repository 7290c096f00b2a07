// libFuzzer target for choices files (models/io/measured_choices.hpp). Each input is parsed: the parse must
// either succeed or throw choices_error; anything else (another exception, a crash, a sanitizer report, an
// allocation over -malloc_limit_mb) is a finding. What parses must write again (choices_text) into text
// that parses to the same choices.

#include <mixprec/models/io/measured_choices.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace mixprec::models;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    try {
        std::vector<mixprec::autodiff::MeasuredChoice> choices;
        try {
            choices = parse_choices(text);
        } catch (const choices_error&) {
            return 0;
        }
        if (parse_choices(choices_text(choices)) != choices) {
            std::fprintf(stderr, "fuzz_load_choices: parsed choices do not write and parse again identically\n");
            std::abort();
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_load_choices: unexpected exception: %s\n", e.what());
        std::abort();
    }
    return 0;
}
