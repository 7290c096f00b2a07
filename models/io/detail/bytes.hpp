#pragma once
// Internal to models/io/ (never installed): byte-level helpers its readers and writers share.

#include <mixprec/models/io/files.hpp>

#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::models::detail {

using Bytes = std::vector<std::uint8_t>;
using Span = std::span<const std::uint8_t>;

template <class... Parts>
std::string cat(const Parts&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    return os.str();
}

inline std::string in_quotes(std::string_view s) { return cat('\'', s, '\''); }

/// "3f 00 ..": bytes in hexadecimal, for messages.
inline std::string hex_bytes(Span bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string s;
    for (const std::uint8_t b : bytes) {
        if (!s.empty()) s += ' ';
        s += digits[b >> 4];
        s += digits[b & 15];
    }
    return s;
}

template <class T>
T get_le(Span in, std::uint64_t at) {
    T v = 0;
    for (std::size_t i = sizeof(T); i-- > 0;) v = static_cast<T>((v << 8) | in[at + i]);
    return v;
}

template <class T>
void put_le(Bytes& out, T value) {
    for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<std::uint8_t>(value >> (8 * i)));
}

/// Whether [offset, offset + length) lies within [0, limit).
inline bool within(std::uint64_t offset, std::uint64_t length, std::uint64_t limit) {
    return offset <= limit && length <= limit - offset;
}

/// Runs f, prefixing the message of an Error or a file_error thrown by it with `where` (as an Error).
template <class Error, class F>
auto located(const std::string& where, F f) {
    try {
        return f();
    } catch (const Error& e) {
        throw Error(where + e.what());
    } catch (const file_error& e) {
        throw Error(where + e.what());
    }
}

} // namespace mixprec::models::detail
