#include <mixprec/models/io/crc32c.hpp>

#include <mixprec/autodiff/tensor/isa.hpp>

#include <array>
#include <cstring>
#include <stdexcept>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace mixprec::models {
namespace {

constexpr std::uint32_t polynomial = 0x82F63B78u; // 0x1EDC6F41 bit-reversed

// tables[k][b]: the CRC of byte b followed by k zero bytes, so eight bytes fold in one step.
constexpr std::array<std::array<std::uint32_t, 256>, 8> make_tables() {
    std::array<std::array<std::uint32_t, 256>, 8> t{};
    for (std::uint32_t b = 0; b < 256; ++b) {
        std::uint32_t c = b;
        for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1u) ? polynomial : 0u);
        t[0][b] = c;
    }
    for (std::size_t k = 1; k < 8; ++k)
        for (std::size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
    return t;
}

constexpr auto tables = make_tables();

std::uint64_t load_le64(const std::uint8_t* p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t hardware(const std::uint8_t* p, std::size_t n, std::uint32_t crc) {
    std::uint64_t c = ~crc;
    for (; n >= 8; p += 8, n -= 8) {
        std::uint64_t word;
        std::memcpy(&word, p, 8); // x86 is little-endian, as the CRC's byte order wants
        c = _mm_crc32_u64(c, word);
    }
    auto c32 = static_cast<std::uint32_t>(c);
    for (; n > 0; ++p, --n) c32 = _mm_crc32_u8(c32, *p);
    return ~c32;
}
#endif

bool detect_hardware() {
#if defined(__x86_64__)
    return __builtin_cpu_supports("sse4.2");
#else
    return false;
#endif
}

} // namespace

std::uint32_t crc32c_portable(std::span<const std::uint8_t> bytes, std::uint32_t crc) {
    const std::uint8_t* p = bytes.data();
    std::size_t n = bytes.size();
    std::uint32_t c = ~crc;
    for (; n >= 8; p += 8, n -= 8) {
        const std::uint64_t w = load_le64(p) ^ c;
        c = tables[7][w & 0xFF] ^ tables[6][(w >> 8) & 0xFF] ^ tables[5][(w >> 16) & 0xFF] ^
            tables[4][(w >> 24) & 0xFF] ^ tables[3][(w >> 32) & 0xFF] ^ tables[2][(w >> 40) & 0xFF] ^
            tables[1][(w >> 48) & 0xFF] ^ tables[0][w >> 56];
    }
    for (; n > 0; ++p, --n) c = (c >> 8) ^ tables[0][(c ^ *p) & 0xFFu];
    return ~c;
}

bool crc32c_hardware_available() {
    static const bool available = detect_hardware();
    return available;
}

std::uint32_t crc32c_hardware(std::span<const std::uint8_t> bytes, std::uint32_t crc) {
    if (!crc32c_hardware_available())
        throw std::logic_error("crc32c_hardware: this CPU has no SSE4.2 crc32 instruction");
#if defined(__x86_64__)
    return hardware(bytes.data(), bytes.size(), crc);
#else
    return crc;
#endif
}

std::uint32_t crc32c(std::span<const std::uint8_t> bytes, std::uint32_t crc) {
    // Every CPU of the avx2 level has SSE4.2; the portable level keeps to the x86-64 baseline.
    const bool hardware = crc32c_hardware_available() && autodiff::isa() >= autodiff::Isa::avx2;
    return hardware ? crc32c_hardware(bytes, crc) : crc32c_portable(bytes, crc);
}

} // namespace mixprec::models
