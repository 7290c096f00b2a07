#pragma once
/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of checkpoint files. The check
/// value of "123456789" is 0xE3069283. crc32c() uses the SSE4.2 crc32 instruction at the avx2
/// instruction-set level and above (autodiff/tensor/isa.hpp) and a portable slicing-by-8 table otherwise; both
/// give the same results.

#include <cstdint>
#include <span>

namespace mixprec::models {

/// CRC-32C of `bytes`, continuing from `crc`, the value returned for the bytes before them (0 to start):
/// crc32c(ab) == crc32c(b, crc32c(a)). Empty input returns `crc` unchanged.
std::uint32_t crc32c(std::span<const std::uint8_t> bytes, std::uint32_t crc = 0);

/// The portable implementation (tables, eight bytes per step), available everywhere.
std::uint32_t crc32c_portable(std::span<const std::uint8_t> bytes, std::uint32_t crc = 0);

/// Whether this CPU has the SSE4.2 crc32 instruction (always false outside x86-64).
bool crc32c_hardware_available();
/// The SSE4.2 implementation; std::logic_error when crc32c_hardware_available() is false.
std::uint32_t crc32c_hardware(std::span<const std::uint8_t> bytes, std::uint32_t crc = 0);

} // namespace mixprec::models
