// The digests of fit.hpp: weights_digest (FNV-1a over the masters, comparable across runs) and
// state_digest (every rank's whole training state, each data-parallel step).
#include <mixprec/models/training/fit.hpp>

#include <mixprec/autodiff/tensor/rng.hpp>
#include <mixprec/optim/optimizer.hpp>

#include <cstdio>
#include <cstring>
#include <variant>

namespace mixprec::models {

namespace {

/// The digest's hash, fast enough to run every step: 64 lanes of 32-bit words, each lane h ← (h ^ w) · c
/// (c odd: for the words after it fixed, a word that differs always changes its lane's end state),
/// vectorized by the compiler; then every lane, small value and length is folded into 64 bits with
/// splitmix64's mixer. Made to catch ranks that diverge, not to resist anyone.
struct Digest {
    static constexpr std::size_t lanes = 64;
    std::uint64_t hash = 0x6a09e667f3bcc909ull;
    void add(const void* data, std::size_t bytes) {
        const auto* p = static_cast<const unsigned char*>(data);
        std::uint32_t h[lanes];
        for (std::size_t k = 0; k < lanes; ++k) h[k] = static_cast<std::uint32_t>(k) * 0x85ebca6bu + 1;
        std::size_t i = 0;
        for (; i + 4 * lanes <= bytes; i += 4 * lanes)
            for (std::size_t k = 0; k < lanes; ++k) {
                std::uint32_t w;
                std::memcpy(&w, p + i + 4 * k, 4);
                h[k] = (h[k] ^ w) * 0x9e3779b1u;
            }
        for (std::size_t k = 0; k < lanes; k += 2)
            hash = autodiff::mix64(hash ^ (std::uint64_t{h[k]} << 32 | h[k + 1]));
        for (; i < bytes; ++i) hash = autodiff::mix64(hash ^ p[i]);
        hash = autodiff::mix64(hash ^ bytes);
    }
    template <class T>
    void add(const T& value) {
        std::uint64_t word = 0;
        static_assert(sizeof value <= sizeof word);
        std::memcpy(&word, &value, sizeof value);
        hash = autodiff::mix64(hash ^ word);
    }
};

} // namespace

std::uint64_t state_digest(const std::vector<autodiff::Variable>& variables, const optim::Optimizer& optimizer) {
    Digest d;
    for (const autodiff::Variable& v : variables) d.add(v.value().raw(), v.value().nbytes());
    // Slots as the optimizer holds them (state() would copy them), then its other values.
    for (const optim::Optimizer::Slot& slot : optimizer.slots()) {
        d.add(slot.variable);
        d.add(slot.values.data(), slot.values.size() * sizeof(float));
    }
    d.add(optimizer.iterations());
    d.add(optimizer.current_loss_scale());
    d.add(optimizer.skipped_steps());
    for (const optim::StateValue& v : optimizer.state_values()) {
        d.add(v.name.data(), v.name.size());
        std::visit([&](const auto& x) { d.add(x); }, v.value);
    }
    return d.hash;
}

std::string weights_digest(const std::vector<autodiff::Variable>& variables) {
    std::uint64_t hash = 0xcbf29ce484222325ull; // FNV-1a, 64 bits
    for (const autodiff::Variable& v : variables) {
        const auto* bytes = static_cast<const unsigned char*>(v.value().raw());
        for (std::size_t i = 0; i < v.value().nbytes(); ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
    }
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
    return text;
}

} // namespace mixprec::models
