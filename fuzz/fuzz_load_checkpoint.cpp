// libFuzzer target for checkpoint loading. Each input is tried into each of the fuzz models as it is
// (exercising the frame: magic, version, length, checksum) and resealed, with its body length and CRC-32C
// recomputed, so that mutations reach the body parser and the checks behind it (resealed, both with a
// training state to restore and without). A load must either succeed or throw checkpoint_error and leave
// the model, optimizer and training state unchanged; anything else (another exception, a crash, a
// sanitizer report, an allocation over -malloc_limit_mb) is a finding. A load that succeeds must save
// again into a checkpoint that loads back to the same bits.

#include "fuzz_model.hpp"

#include <mixprec/models/io/crc32c.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>

namespace {

[[noreturn]] void finding(const char* what) {
    std::fprintf(stderr, "fuzz_load_checkpoint: %s\n", what);
    std::abort();
}

void try_load(std::span<const std::uint8_t> bytes, fuzz_model::Kind kind, bool with_state) {
    fuzz_model::Target target(kind);
    target.optimizer->build(target.trainable); // built, so that a refusal must leave its slots as they are
    const std::vector<std::uint8_t> before = target.fingerprint();
    try {
        mixprec::models::load_checkpoint_bytes(bytes, target.variables, target.policy, *target.optimizer,
                                               with_state ? &target.state : nullptr);
    } catch (const mixprec::models::checkpoint_error&) {
        if (target.fingerprint() != before) finding("a refused load changed the model, optimizer or state");
        return;
    }
    // Loaded: the working copies re-derive from the masters, and saving again gives a loadable checkpoint.
    for (const auto& v : target.variables) (void)v.read();
    const auto again = mixprec::models::checkpoint_bytes(target.variables, target.policy, *target.optimizer,
                                                         with_state ? &target.state : nullptr);
    fuzz_model::Target copy(kind);
    mixprec::models::load_checkpoint_bytes(again, copy.variables, copy.policy, *copy.optimizer,
                                           with_state ? &copy.state : nullptr);
    if (copy.fingerprint() != target.fingerprint()) finding("a saved checkpoint did not load back identically");
}

std::vector<std::uint8_t> resealed(std::span<const std::uint8_t> bytes) {
    std::vector<std::uint8_t> b(bytes.begin(), bytes.end());
    constexpr std::size_t prefix = 20, crc = 4;
    if (b.size() < prefix + crc) return b;
    const std::uint64_t body = b.size() - prefix - crc;
    for (std::size_t i = 0; i < 8; ++i) b[12 + i] = static_cast<std::uint8_t>(body >> (8 * i));
    const std::uint32_t sum = mixprec::models::crc32c(std::span<const std::uint8_t>(b.data(), b.size() - crc));
    for (std::size_t i = 0; i < 4; ++i) b[b.size() - crc + i] = static_cast<std::uint8_t>(sum >> (8 * i));
    return b;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::uint8_t> bytes(data, size);
    const std::vector<std::uint8_t> sealed = resealed(bytes);
    try {
        for (fuzz_model::Kind kind : fuzz_model::kinds) {
            try_load(bytes, kind, true);
            try_load(sealed, kind, true);
            try_load(sealed, kind, false); // checkpoints without a training state load only this way
        }
        try {
            (void)mixprec::models::read_checkpoint_info(std::span<const std::uint8_t>(sealed));
        } catch (const mixprec::models::checkpoint_error&) {}
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_load_checkpoint: unexpected exception: %s\n", e.what());
        std::abort();
    }
    return 0;
}
