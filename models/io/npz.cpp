// .npz archives: the zip records, read through the central directory, and deflate through zlib.

#include <mixprec/models/io/npz.hpp>

#include <mixprec/models/io/detail/bytes.hpp>

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <set>

namespace mixprec::models {

static_assert(std::endian::native == std::endian::little,
              "npz.cpp copies little-endian array bytes to and from tensor storage as they are");

namespace {

using namespace detail;

[[noreturn]] void fail(const std::string& message) { throw npy_error(message); }

// ---- .npz: zip records ----

constexpr std::uint32_t local_signature = 0x04034b50, central_signature = 0x02014b50, end_signature = 0x06054b50,
                        zip64_end_signature = 0x06064b50, zip64_locator_signature = 0x07064b50,
                        descriptor_signature = 0x08074b50;
constexpr std::size_t local_bytes = 30, central_bytes = 46, end_bytes = 22, zip64_end_bytes = 56,
                      zip64_locator_bytes = 20;
constexpr std::uint16_t flag_encrypted = 1, flag_descriptor = 8, flag_strong_encryption = 64, flag_utf8 = 0x800;
constexpr std::uint16_t known_flags = 2 | 4 | flag_descriptor | flag_utf8;
constexpr std::uint16_t method_stored = 0, method_deflated = 8;
constexpr std::uint64_t max_deflate_ratio = 1032, deflate_slack = 1024; // zlib: at most 1032:1
constexpr std::uint32_t max32 = 0xffffffff;
constexpr std::uint16_t max16 = 0xffff;

std::uint32_t crc32_of(Span data) {
    uLong crc = crc32(0L, Z_NULL, 0);
    for (std::size_t done = 0; done < data.size();) {
        const auto n = static_cast<uInt>(std::min<std::size_t>(data.size() - done, std::size_t{1} << 30));
        crc = crc32(crc, data.data() + done, n);
        done += n;
    }
    return static_cast<std::uint32_t>(crc);
}

/// The zip64 extended information field (id 1) among `extra`'s fields, if there is one.
std::optional<Span> zip64_field(Span extra) {
    std::optional<Span> found;
    std::size_t p = 0;
    while (p < extra.size()) {
        if (extra.size() - p < 4) fail("malformed extra field: a partial field header");
        const auto id = get_le<std::uint16_t>(extra, p), size = get_le<std::uint16_t>(extra, p + 2);
        if (extra.size() - p - 4 < size) fail(cat("malformed extra field: field ", id, " runs past the extra data"));
        if (id == 1) {
            if (found) fail("two ZIP64 extra fields");
            found = extra.subspan(p + 4, size);
        }
        p += 4 + std::size_t{size};
    }
    return found;
}

struct Entry {
    std::string name; // as stored, with ".npy"
    std::uint16_t flags = 0, method = 0;
    std::uint32_t crc = 0;
    std::uint64_t compressed = 0, size = 0, offset = 0; // of the local header
    std::uint64_t data = 0, end = 0;                    // the data's offset; the end of the data and descriptor
};

class ZipReader {
  public:
    explicit ZipReader(Span bytes) : in_(bytes) {}

    NpzArrays read() {
        const std::uint64_t directory_end = find_end();
        read_central_directory(directory_end);
        for (Entry& e : entries_) located<npy_error>(cat("member ", in_quotes(e.name), ": "), [&] { check_local(e); });
        check_overlaps();
        NpzArrays arrays;
        arrays.reserve(entries_.size());
        for (const Entry& e : entries_)
            arrays.emplace_back(e.name.substr(0, e.name.size() - 4),
                                located<npy_error>(cat("member ", in_quotes(e.name), ": "), [&] { return member(e); }));
        return arrays;
    }

  private:
    /// Finds the end records; returns where the central directory must end.
    std::uint64_t find_end() {
        if (in_.size() >= npy_magic.size() && std::equal(npy_magic.begin(), npy_magic.end(), in_.begin()))
            fail("not an .npz (zip) archive: it is a .npy file (use read_npy)");
        if (in_.size() < end_bytes)
            fail(cat(in_.size(), " bytes is too short for an .npz (zip) archive (at least ", end_bytes, ")"));
        std::optional<std::uint64_t> at;
        const std::uint64_t lowest = in_.size() - end_bytes > max16 ? in_.size() - end_bytes - max16 : 0;
        for (std::uint64_t p = in_.size() - end_bytes + 1; p-- > lowest;)
            if (get_le<std::uint32_t>(in_, p) == end_signature &&
                get_le<std::uint16_t>(in_, p + 20) == in_.size() - p - end_bytes) {
                at = p;
                break;
            }
        if (!at) fail("not an .npz (zip) archive, or a truncated one: no end-of-central-directory record");
        const std::uint64_t end = *at;
        if (get_le<std::uint16_t>(in_, end + 4) != 0 || get_le<std::uint16_t>(in_, end + 6) != 0)
            fail("multi-disk zip archives are not supported");
        std::uint64_t on_disk = get_le<std::uint16_t>(in_, end + 8), count = get_le<std::uint16_t>(in_, end + 10);
        std::uint64_t size = get_le<std::uint32_t>(in_, end + 12), offset = get_le<std::uint32_t>(in_, end + 16);
        std::uint64_t directory_end = end;
        const bool locator = end >= zip64_locator_bytes &&
                             get_le<std::uint32_t>(in_, end - zip64_locator_bytes) == zip64_locator_signature;
        if (locator) {
            const std::uint64_t l = end - zip64_locator_bytes;
            if (get_le<std::uint32_t>(in_, l + 4) != 0 || get_le<std::uint32_t>(in_, l + 16) > 1)
                fail("multi-disk zip archives are not supported");
            const auto record = get_le<std::uint64_t>(in_, l + 8);
            if (!within(record, zip64_end_bytes, l) || get_le<std::uint32_t>(in_, record) != zip64_end_signature)
                fail(cat("the ZIP64 end locator points at offset ", record, ", where there is no ZIP64 end record"));
            if (get_le<std::uint64_t>(in_, record + 4) != l - record - 12)
                fail(cat("the ZIP64 end record declares ", get_le<std::uint64_t>(in_, record + 4), " bytes, it has ",
                         l - record - 12, " before its locator"));
            if (get_le<std::uint32_t>(in_, record + 16) != 0 || get_le<std::uint32_t>(in_, record + 20) != 0)
                fail("multi-disk zip archives are not supported");
            const auto agree = [&](std::uint64_t& classic, std::uint64_t marker, std::size_t at, const char* what) {
                const auto wide = get_le<std::uint64_t>(in_, record + at);
                if (classic != marker && classic != wide)
                    fail(cat("the end records disagree on the ", what, ": ", classic, " and ", wide, " (ZIP64)"));
                classic = wide;
            };
            agree(on_disk, max16, 24, "entries on this disk");
            agree(count, max16, 32, "number of entries");
            agree(size, max32, 40, "central directory's size");
            agree(offset, max32, 48, "central directory's offset");
            directory_end = record;
        } else if (count == max16 || size == max32 || offset == max32) {
            fail("the end record has ZIP64 markers but there is no ZIP64 end locator");
        }
        if (on_disk != count) fail("multi-disk zip archives are not supported");
        if (offset > directory_end || size != directory_end - offset)
            fail(cat("the central directory (", size, " bytes at offset ", offset,
                     ") does not end where the end record begins (offset ", directory_end, ")"));
        if (count > size / central_bytes)
            fail(cat("the end record declares ", count, " entries, a central directory of ", size,
                     " bytes holds at most ", size / central_bytes));
        directory_ = offset;
        count_ = count;
        return directory_end;
    }

    void read_central_directory(std::uint64_t directory_end) {
        std::set<std::string> names;
        std::uint64_t total = 0;
        std::uint64_t p = directory_;
        entries_.reserve(static_cast<std::size_t>(count_));
        for (std::uint64_t i = 0; i < count_; ++i) {
            if (!within(p, central_bytes, directory_end) || get_le<std::uint32_t>(in_, p) != central_signature)
                fail(cat("central directory entry ", i, " of ", count_, " is missing or damaged (offset ", p, ")"));
            const auto name_length = get_le<std::uint16_t>(in_, p + 28),
                       extra_length = get_le<std::uint16_t>(in_, p + 30),
                       comment_length = get_le<std::uint16_t>(in_, p + 32);
            const std::uint64_t variable = std::uint64_t{name_length} + extra_length + comment_length;
            if (!within(p + central_bytes, variable, directory_end))
                fail(cat("central directory entry ", i, " runs past the end of the central directory"));
            Entry e;
            e.name.assign(reinterpret_cast<const char*>(in_.data() + p + central_bytes), name_length);
            located<npy_error>(cat("member ", in_quotes(e.name), ": "), [&] {
                e.flags = get_le<std::uint16_t>(in_, p + 8);
                e.method = get_le<std::uint16_t>(in_, p + 10);
                e.crc = get_le<std::uint32_t>(in_, p + 16);
                e.compressed = get_le<std::uint32_t>(in_, p + 20);
                e.size = get_le<std::uint32_t>(in_, p + 24);
                e.offset = get_le<std::uint32_t>(in_, p + 42);
                std::uint64_t disk = get_le<std::uint16_t>(in_, p + 34);
                const std::optional<Span> zip64 =
                    zip64_field(in_.subspan(p + central_bytes + name_length, extra_length));
                std::size_t used = 0;
                using Field = std::pair<std::uint64_t*, std::uint64_t>;
                for (auto [field, marker] : std::array<Field, 4>{
                         {{&e.size, max32}, {&e.compressed, max32}, {&e.offset, max32}, {&disk, max16}}}) {
                    if (*field != marker) continue;
                    if (!zip64) fail("a size or offset is 0xffffffff but there is no ZIP64 extra field");
                    if (zip64->size() < used + (marker == max16 ? 4 : 8)) fail("its ZIP64 extra field is too short");
                    *field =
                        marker == max16 ? get_le<std::uint32_t>(*zip64, used) : get_le<std::uint64_t>(*zip64, used);
                    used += marker == max16 ? 4 : 8;
                }
                if (disk != 0) fail("multi-disk zip archives are not supported");
                check_entry(e);
                if (!names.insert(e.name).second) fail("the name appears twice in the archive");
                if (e.size > max_npy_file_bytes - total)
                    fail(cat("the members declare more than ", max_npy_file_bytes, " bytes uncompressed"));
                total += e.size;
            });
            entries_.push_back(std::move(e));
            p += central_bytes + variable;
        }
        if (p != directory_end)
            fail(cat("the central directory holds ", directory_end - p, " bytes after its ", count_, " entries"));
    }

    static void check_entry(const Entry& e) {
        if (e.flags & (flag_encrypted | flag_strong_encryption)) fail("encrypted members are not supported");
        if (e.flags & ~known_flags) fail(cat("unsupported flags 0x", std::hex, e.flags));
        if (e.method != method_stored && e.method != method_deflated)
            fail(cat("compression method ", e.method, " is not supported (only 0, stored, and 8, deflated)"));
        if (e.name.size() < 4 || e.name.compare(e.name.size() - 4, 4, ".npy") != 0)
            fail("not a .npy member: its name does not end in .npy");
        if (e.method == method_stored && e.compressed != e.size)
            fail(cat("stored, but its compressed size ", e.compressed, " differs from its size ", e.size));
        if (e.method == method_deflated && e.compressed < (std::uint64_t{1} << 48) &&
            e.size > e.compressed * max_deflate_ratio + deflate_slack)
            fail(cat("declares ", e.size, " bytes deflated into ", e.compressed, ", beyond deflate's largest ratio"));
    }

    /// The local header and data descriptor against the central directory.
    void check_local(Entry& e) const {
        if (!within(e.offset, local_bytes, directory_) || get_le<std::uint32_t>(in_, e.offset) != local_signature)
            fail(cat("no local header at offset ", e.offset));
        const auto flags = get_le<std::uint16_t>(in_, e.offset + 6), method = get_le<std::uint16_t>(in_, e.offset + 8);
        if (flags != e.flags)
            fail(cat("flags 0x", std::hex, flags, " in its local header, 0x", e.flags, " in the central directory"));
        if (method != e.method)
            fail(cat("compression method ", method, " in its local header, ", e.method, " in the central directory"));
        const auto name_length = get_le<std::uint16_t>(in_, e.offset + 26),
                   extra_length = get_le<std::uint16_t>(in_, e.offset + 28);
        const std::uint64_t name_at = e.offset + local_bytes;
        if (!within(name_at, std::uint64_t{name_length} + extra_length, directory_))
            fail("its local header runs into the central directory");
        const std::string_view name(reinterpret_cast<const char*>(in_.data() + name_at), name_length);
        if (name != e.name) fail(cat("its local header names it ", in_quotes(name)));
        const std::optional<Span> zip64 = zip64_field(in_.subspan(name_at + name_length, extra_length));
        std::uint64_t size = get_le<std::uint32_t>(in_, e.offset + 22),
                      compressed = get_le<std::uint32_t>(in_, e.offset + 18);
        if (zip64 && (size == max32 || compressed == max32)) {
            if (zip64->size() < 16) fail("the ZIP64 extra field of its local header is too short");
            if (size == max32) size = get_le<std::uint64_t>(*zip64, 0);
            if (compressed == max32) compressed = get_le<std::uint64_t>(*zip64, 8);
        }
        const auto crc = get_le<std::uint32_t>(in_, e.offset + 14);
        const bool deferred = e.flags & flag_descriptor; // the local values may be zero, a descriptor follows
        const auto agree = [&](std::uint64_t local, std::uint64_t central, const char* what) {
            if (local != central && !(deferred && local == 0))
                fail(cat("its local header declares ", what, ' ', local, ", the central directory ", central));
        };
        agree(crc, e.crc, "CRC-32");
        agree(compressed, e.compressed, "compressed size");
        agree(size, e.size, "size");
        e.data = name_at + name_length + extra_length;
        if (!within(e.data, e.compressed, directory_))
            fail(cat("its ", e.compressed, " bytes of data at offset ", e.data, " run into the central directory"));
        e.end = e.data + e.compressed;
        if (deferred) e.end += descriptor(e, zip64.has_value());
    }

    /// Checks the data descriptor after e's data; returns its length.
    std::uint64_t descriptor(const Entry& e, bool wide) const {
        const std::uint64_t field = wide ? 8 : 4;
        for (const bool signed_ : {true, false}) {
            std::uint64_t p = e.end;
            const std::uint64_t length = (signed_ ? 4 : 0) + 4 + 2 * field;
            if (!within(p, length, directory_)) continue;
            if (signed_ && get_le<std::uint32_t>(in_, p) != descriptor_signature) continue;
            p += signed_ ? 4 : 0;
            const auto value = [&](std::uint64_t at) {
                return wide ? get_le<std::uint64_t>(in_, at) : get_le<std::uint32_t>(in_, at);
            };
            if (get_le<std::uint32_t>(in_, p) == e.crc && value(p + 4) == e.compressed &&
                value(p + 4 + field) == e.size)
                return length;
        }
        fail("its data descriptor is missing or disagrees with the central directory");
    }

    void check_overlaps() const {
        std::vector<const Entry*> order;
        for (const Entry& e : entries_) order.push_back(&e);
        std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) { return a->offset < b->offset; });
        for (std::size_t i = 1; i < order.size(); ++i)
            if (order[i]->offset < order[i - 1]->end)
                fail(cat("members ", in_quotes(order[i - 1]->name), " (bytes ", order[i - 1]->offset, " to ",
                         order[i - 1]->end, ") and ", in_quotes(order[i]->name), " (from byte ", order[i]->offset,
                         ") overlap"));
    }

    NpyArray member(const Entry& e) const {
        const Span data = in_.subspan(e.data, e.compressed);
        if (e.method == method_stored) {
            check_crc(e, data);
            return parse_npy(data);
        }
        const Bytes inflated = inflate_member(e, data);
        check_crc(e, inflated);
        return parse_npy(inflated);
    }

    static void check_crc(const Entry& e, Span data) {
        const std::uint32_t computed = crc32_of(data);
        if (computed != e.crc)
            fail(cat("CRC-32 mismatch (stored 0x", std::hex, e.crc, ", computed 0x", computed,
                     "): the data is damaged"));
    }

    /// Inflates into exactly the declared size, never more.
    static Bytes inflate_member(const Entry& e, Span data) {
        struct Stream {
            z_stream z{};
            Stream() {
                if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw std::bad_alloc();
            }
            ~Stream() { inflateEnd(&z); }
        } s;
        Bytes out(static_cast<std::size_t>(e.size));
        std::size_t in_pos = 0, out_pos = 0;
        constexpr std::size_t chunk = std::size_t{1} << 30;
        for (;;) {
            std::uint8_t spare = 0;
            const bool full = out_pos == out.size();
            s.z.next_in = const_cast<Bytef*>(data.data() + in_pos); // zlib only reads its input
            s.z.avail_in = static_cast<uInt>(std::min(data.size() - in_pos, chunk));
            s.z.next_out = full ? &spare : out.data() + out_pos;
            s.z.avail_out = full ? 1 : static_cast<uInt>(std::min(out.size() - out_pos, chunk));
            const uInt in_before = s.z.avail_in, out_before = s.z.avail_out;
            const int rc = inflate(&s.z, Z_NO_FLUSH);
            in_pos += in_before - s.z.avail_in;
            const std::size_t produced = out_before - s.z.avail_out;
            if (full && produced > 0) fail(cat("inflates to more than its declared size of ", e.size, " bytes"));
            out_pos += full ? 0 : produced;
            if (rc == Z_STREAM_END) break;
            if (rc == Z_MEM_ERROR) throw std::bad_alloc();
            if (rc == Z_BUF_ERROR || (rc == Z_OK && produced == 0 && in_before == s.z.avail_in))
                fail(cat("its deflate stream is truncated after ", out_pos, " of ", e.size, " bytes"));
            if (rc != Z_OK) fail(cat("corrupt deflate data: zlib reports '", s.z.msg ? s.z.msg : "unknown error", "'"));
        }
        if (out_pos != out.size())
            fail(cat("inflates to ", out_pos, " bytes, its central directory declares ", e.size));
        if (in_pos != data.size())
            fail(cat(data.size() - in_pos, " bytes follow its deflate stream within its compressed size"));
        return out;
    }

    Span in_;
    std::uint64_t directory_ = 0, count_ = 0;
    std::vector<Entry> entries_;
};

Bytes deflate_raw(Span data) {
    struct Stream {
        z_stream z{};
        Stream() {
            if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
                throw std::bad_alloc();
        }
        ~Stream() { deflateEnd(&z); }
    } s;
    Bytes out(deflateBound(&s.z, static_cast<uLong>(data.size())));
    s.z.next_in = const_cast<Bytef*>(data.data()); // zlib only reads its input
    s.z.avail_in = static_cast<uInt>(data.size());
    s.z.next_out = out.data();
    s.z.avail_out = static_cast<uInt>(out.size());
    if (deflate(&s.z, Z_FINISH) != Z_STREAM_END) fail("zlib could not deflate a member");
    out.resize(out.size() - s.z.avail_out);
    return out;
}

} // namespace

NpzArrays parse_npz(std::span<const std::uint8_t> bytes) { return ZipReader(bytes).read(); }

NpzArrays read_npz(const std::filesystem::path& path) {
    const Bytes bytes = located<npy_error>(cat("cannot read .npz file ", in_quotes(path.string()), ": "),
                                           [&] { return read_file_bounded(path, max_npy_file_bytes); });
    return located<npy_error>(cat(in_quotes(path.string()), ": "), [&] { return parse_npz(bytes); });
}

std::vector<std::uint8_t> npz_bytes(const NpzArrays& arrays, bool compress) {
    std::set<std::string_view> names;
    for (const auto& [name, array] : arrays) {
        if (!names.insert(name).second)
            throw std::invalid_argument(cat("npz_bytes: the name ", in_quotes(name), " appears twice"));
        if (name.size() + 4 > max16)
            throw std::invalid_argument(cat("npz_bytes: a name of ", name.size(), " bytes is too long for zip"));
    }
    if (arrays.size() >= max16)
        fail(cat("npz_bytes: ", arrays.size(), " members need ZIP64, which this writer does not write"));
    constexpr std::uint16_t version = 20, dos_date = (1 << 5) | 1; // 1980-01-01, 00:00
    Bytes out, directory;
    for (const auto& [name, array] : arrays) {
        const std::string member = name + ".npy";
        const Bytes npy = npy_bytes(array);
        if (npy.size() >= max32)
            fail(cat("npz_bytes: member ", in_quotes(member), " of ", npy.size(),
                     " bytes reaches 4 GiB, which needs ZIP64; this writer does not write it"));
        const Bytes deflated = compress ? deflate_raw(npy) : Bytes{};
        const Bytes& data = compress ? deflated : npy;
        if (data.size() >= max32 || out.size() >= max32)
            fail("npz_bytes: the archive reaches 4 GiB, which needs ZIP64; this writer does not write it");
        const std::uint16_t flags =
            std::any_of(member.begin(), member.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; })
                ? flag_utf8
                : 0;
        const std::uint16_t method = compress ? method_deflated : method_stored;
        const std::uint32_t crc = crc32_of(npy);
        const auto common = [&](Bytes& b) {
            put_le(b, version);
            put_le(b, flags);
            put_le(b, method);
            put_le<std::uint16_t>(b, 0);
            put_le(b, dos_date);
            put_le(b, crc);
            put_le(b, static_cast<std::uint32_t>(data.size()));
            put_le(b, static_cast<std::uint32_t>(npy.size()));
            put_le(b, static_cast<std::uint16_t>(member.size()));
            put_le<std::uint16_t>(b, 0);
        };
        put_le(directory, central_signature);
        put_le<std::uint16_t>(directory, 3 << 8 | version); // made by Unix, so the mode below applies
        common(directory);
        put_le<std::uint16_t>(directory, 0); // comment
        put_le<std::uint16_t>(directory, 0); // disk
        put_le<std::uint16_t>(directory, 0); // internal attributes
        put_le<std::uint32_t>(directory, 0100644u << 16);
        put_le(directory, static_cast<std::uint32_t>(out.size()));
        directory.insert(directory.end(), member.begin(), member.end());
        put_le(out, local_signature);
        common(out);
        out.insert(out.end(), member.begin(), member.end());
        out.insert(out.end(), data.begin(), data.end());
    }
    if (out.size() + directory.size() >= max32)
        fail("npz_bytes: the archive reaches 4 GiB, which needs ZIP64; this writer does not write it");
    const auto offset = static_cast<std::uint32_t>(out.size());
    out.insert(out.end(), directory.begin(), directory.end());
    put_le(out, end_signature);
    put_le<std::uint32_t>(out, 0); // disks
    put_le(out, static_cast<std::uint16_t>(arrays.size()));
    put_le(out, static_cast<std::uint16_t>(arrays.size()));
    put_le(out, static_cast<std::uint32_t>(directory.size()));
    put_le(out, offset);
    put_le<std::uint16_t>(out, 0); // comment
    return out;
}

void write_npz(const std::filesystem::path& path, const NpzArrays& arrays, bool compress) {
    const Bytes bytes = npz_bytes(arrays, compress);
    located<npy_error>(cat("cannot write .npz file ", in_quotes(path.string()), ": "),
                       [&] { write_file_atomically(path, bytes); });
}

} // namespace mixprec::models
