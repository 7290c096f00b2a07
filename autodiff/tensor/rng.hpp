#pragma once
/// Rng: a small, fast, seedable random generator whose whole state is four integers, so that it can be
/// saved and restored exactly (xoshiro256** seeded through splitmix64). Used for dropout masks,
/// initializers and shuffling; every use takes an explicit Rng, never a global one.
///
/// counter_bits is the counter-based companion: the random bits of element i of a stream are computed
/// on their own, so a kernel that needs one random number per element (stochastic rounding) gives the
/// same bits however its work is split across threads.

#include <array>
#include <bit>
#include <cstdint>

namespace mixprec::autodiff {

/// splitmix64's output function: a bijection of 64-bit words that mixes every input bit into every
/// output bit.
constexpr std::uint64_t mix64(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/// The 64 random bits of element `index` of the stream `key`: splitmix64's output for the state
/// key + (index + 1) · 0x9e3779b97f4a7c15, which is the index-th output of splitmix64 seeded with key.
/// A stream derived from another by a word w (a step, a tensor) is counter_bits(key, w).
constexpr std::uint64_t counter_bits(std::uint64_t key, std::uint64_t index) {
    return mix64(key + (index + 1) * 0x9e3779b97f4a7c15ull);
}

class Rng {
  public:
    using result_type = std::uint64_t;

    explicit Rng(std::uint64_t seed = 0) { reseed(seed); }

    void reseed(std::uint64_t seed) {
        for (std::uint64_t i = 0; i < state_.size(); ++i) state_[i] = counter_bits(seed, i); // splitmix64
    }

    /// The next 64 random bits.
    std::uint64_t operator()() {
        const std::uint64_t result = std::rotl(state_[1] * 5, 7) * 9;
        const std::uint64_t t = state_[1] << 17;
        state_[2] ^= state_[0];
        state_[3] ^= state_[1];
        state_[1] ^= state_[2];
        state_[0] ^= state_[3];
        state_[2] ^= t;
        state_[3] = std::rotl(state_[3], 45);
        return result;
    }

    /// Uniform in [0, 1), 24 random bits.
    float uniform() { return static_cast<float>((*this)() >> 40) * 0x1p-24f; }

    static constexpr result_type min() { return 0; }
    static constexpr result_type max() { return ~result_type{0}; }

    const std::array<std::uint64_t, 4>& state() const { return state_; }
    void set_state(const std::array<std::uint64_t, 4>& state) { state_ = state; }
    friend bool operator==(const Rng&, const Rng&) = default;

  private:
    std::array<std::uint64_t, 4> state_{};
};

} // namespace mixprec::autodiff
