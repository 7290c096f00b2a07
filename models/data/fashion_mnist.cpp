// Fashion-MNIST reader: a streaming gzip decoder (zlib) that checks every step, the IDX header checks,
// and the uint8 → float32 batch conversion.

#include <mixprec/models/data/fashion_mnist.hpp>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>

namespace mixprec::models {

namespace fs = std::filesystem;

namespace {

/// Concatenates the arguments with operator<<, for error messages.
template <class... Parts>
std::string cat(const Parts&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    return os.str();
}

std::string quoted(const fs::path& path) { return cat('\'', path.string(), '\''); }

constexpr const char* install_hint =
    "; install it with: sudo apt-get install dataset-fashion-mnist, or pass the directory that holds the "
    "Fashion-MNIST .gz files (mixprec-train --data DIR, or FashionMnist::load(dir))";

/// Deflate cannot expand its input by more than this factor (zlib's documented limit is 1032:1), so a
/// header promising more than ratio × file size (plus room for headers) is lying, whatever follows.
constexpr std::uint64_t max_inflate_ratio = 1032;
constexpr std::uint64_t inflate_slack = 4096;
/// Buffers for decompressed data grow in steps up to this size, so that memory follows the data that
/// really arrives rather than what a header says.
constexpr std::size_t first_allocation = std::size_t{64} << 20;

/// Reads the decompressed bytes of a gzip file (one member or several concatenated), in pieces.
class GzipReader {
  public:
    explicit GzipReader(const fs::path& path) : path_(path), in_(std::size_t{1} << 18) {
        std::error_code ec;
        const fs::file_status status = fs::status(path, ec);
        if (status.type() == fs::file_type::not_found)
            throw dataset_error(cat("Fashion-MNIST file ", quoted(path), " not found", install_hint));
        if (fs::is_directory(status))
            throw dataset_error(cat("Fashion-MNIST file ", quoted(path), " is a directory, not a gzip file"));
        file_.reset(std::fopen(path.c_str(), "rb"));
        if (!file_)
            throw dataset_error(cat("cannot open Fashion-MNIST file ", quoted(path), ": ", std::strerror(errno)));
        if (fs::is_regular_file(status)) file_size_ = static_cast<std::uint64_t>(fs::file_size(path, ec));
        size_known_ = fs::is_regular_file(status) && !ec;
        if (!refill())
            throw dataset_error(cat(quoted(path), " is empty (0 bytes); expected a gzip-compressed IDX file"));
        check_member_start();
        if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) throw std::bad_alloc();
        z_initialized_ = true;
    }
    ~GzipReader() {
        if (z_initialized_) inflateEnd(&z_);
    }
    GzipReader(const GzipReader&) = delete;
    GzipReader& operator=(const GzipReader&) = delete;

    const fs::path& path() const { return path_; }
    /// Size of the compressed file, when it is a regular file.
    std::optional<std::uint64_t> file_size() const {
        if (!size_known_) return std::nullopt;
        return std::max(file_size_, consumed_total_);
    }
    /// Decompressed bytes handed out so far.
    std::uint64_t produced() const { return produced_; }

    /// Fills out[0, n) and returns n, or fewer only when the data ends (cleanly: every gzip member
    /// complete with a correct checksum). dataset_error when the file is truncated, corrupt, or holds
    /// something other than gzip members.
    std::size_t read(std::uint8_t* out, std::size_t n) {
        std::size_t done = 0;
        while (done < n && !finished_) {
            if (z_.avail_in == 0 && !refill()) {
                if (between_members_) {
                    finished_ = true;
                    break;
                }
                throw dataset_error(cat(quoted(path_), " is truncated: its gzip stream stops after ", produced_ + done,
                                        " decompressed bytes, before its end marker"));
            }
            if (between_members_) {
                check_member_start();
                if (inflateReset(&z_) != Z_OK) throw dataset_error(cat(quoted(path_), ": cannot restart zlib"));
                between_members_ = false;
            }
            const std::size_t want = std::min<std::size_t>(n - done, std::numeric_limits<uInt>::max() / 2);
            z_.next_out = out + done;
            z_.avail_out = static_cast<uInt>(want);
            const int rc = inflate(&z_, Z_NO_FLUSH);
            done += want - z_.avail_out;
            if (rc == Z_STREAM_END) {
                between_members_ = true;
            } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
                const char* why = z_.msg ? z_.msg : "unknown zlib error";
                throw dataset_error(cat(quoted(path_), " is corrupt: zlib reports '", why, "' after ", produced_ + done,
                                        " decompressed bytes"));
            }
        }
        produced_ += done;
        return done;
    }

  private:
    struct file_closer {
        void operator()(std::FILE* f) const { std::fclose(f); }
    };

    /// Reads the next piece of the file into in_; false at the end of the file.
    bool refill() {
        const std::size_t got = std::fread(in_.data(), 1, in_.size(), file_.get());
        if (got == 0 && std::ferror(file_.get()))
            throw dataset_error(cat("cannot read Fashion-MNIST file ", quoted(path_), ": ", std::strerror(errno)));
        consumed_total_ += got;
        z_.next_in = in_.data();
        z_.avail_in = static_cast<uInt>(got);
        return got > 0;
    }

    /// The next input bytes must open a gzip member (1f 8b).
    void check_member_start() const {
        const std::uint64_t offset = consumed_total_ - z_.avail_in;
        const unsigned b0 = z_.next_in[0];
        const bool second_known = z_.avail_in >= 2;
        if (b0 == 0x1f && (!second_known || z_.next_in[1] == 0x8b)) return;
        char bytes[16];
        if (second_known)
            std::snprintf(bytes, sizeof bytes, "%02x %02x", b0, static_cast<unsigned>(z_.next_in[1]));
        else
            std::snprintf(bytes, sizeof bytes, "%02x", b0);
        if (offset == 0)
            throw dataset_error(cat(quoted(path_), " is not a gzip file: it starts with bytes ", bytes,
                                    ", not 1f 8b; expected a gzip-compressed IDX file"));
        throw dataset_error(
            cat(quoted(path_), " has trailing data after its gzip stream: bytes ", bytes, " at offset ", offset));
    }

    fs::path path_;
    std::unique_ptr<std::FILE, file_closer> file_;
    std::vector<unsigned char> in_;
    z_stream z_{};
    bool z_initialized_ = false;
    bool between_members_ = false;
    bool finished_ = false;
    bool size_known_ = false;
    std::uint64_t file_size_ = 0;
    std::uint64_t consumed_total_ = 0;
    std::uint64_t produced_ = 0;
};

std::uint32_t big_endian_u32(const std::uint8_t* p) {
    return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | std::uint32_t{p[3]};
}

/// Reads the IDX header of `header.size()` bytes; dataset_error when the data is shorter.
void read_header(GzipReader& reader, std::span<std::uint8_t> header) {
    const std::size_t got = reader.read(header.data(), header.size());
    if (got == header.size()) return;
    if (got == 0)
        throw dataset_error(cat(quoted(reader.path()), " holds no data: its gzip stream is empty; expected an IDX ",
                                "header of ", header.size(), " bytes"));
    throw dataset_error(cat(quoted(reader.path()), " is truncated: its IDX header needs ", header.size(),
                            " bytes, it holds only ", got));
}

void check_magic(const GzipReader& reader, std::uint32_t magic, std::uint32_t expected, const char* what) {
    if (magic == expected) return;
    std::string message = cat(quoted(reader.path()), " has magic number ", magic, ", expected ", expected,
                              " (an IDX file of ", what, ")");
    if (magic == FashionMnist::labels_magic) message += "; it looks like a labels file";
    if (magic == FashionMnist::images_magic) message += "; it looks like an images file";
    throw dataset_error(message);
}

/// Reads exactly `promised` payload bytes (the header already read), checking first that the file can
/// hold them, growing the buffer as data arrives, and checking that nothing follows them.
std::vector<std::uint8_t> read_payload(GzipReader& reader, std::uint64_t count, std::uint64_t bytes_per_item,
                                       const char* items, std::uint64_t header_bytes) {
    const std::uint64_t promised = count * bytes_per_item; // count < 2^32, bytes_per_item ≤ 784: no overflow
    const auto describe_promise = [&] {
        return cat("its header promises ", count, ' ', items, " (", promised, " bytes)");
    };
    const std::optional<std::uint64_t> file_size = reader.file_size();
    if (file_size && promised + header_bytes > *file_size * max_inflate_ratio + inflate_slack)
        throw dataset_error(cat(quoted(reader.path()), " is truncated or its header is wrong: ", describe_promise(),
                                ", but a gzip file of ", *file_size, " bytes cannot hold that much"));
    if (promised > std::numeric_limits<std::size_t>::max() / 2)
        throw dataset_error(cat(quoted(reader.path()), ": ", describe_promise(), ", too many for this machine"));

    std::vector<std::uint8_t> data;
    std::size_t filled = 0;
    while (filled < promised) {
        const std::size_t target = std::min<std::uint64_t>(promised, std::max(first_allocation, 2 * data.size()));
        data.resize(target);
        const std::size_t got = reader.read(data.data() + filled, target - filled);
        filled += got;
        if (filled < target) {
            throw dataset_error(cat(quoted(reader.path()), " is truncated: ", describe_promise(),
                                    " but the file holds only ", filled, " bytes of them (", filled / bytes_per_item,
                                    " complete ", items, ")"));
        }
    }
    std::uint8_t extra = 0;
    if (reader.read(&extra, 1) != 0)
        throw dataset_error(cat(quoted(reader.path()), " holds more data than ", describe_promise()));
    return data;
}

std::vector<std::uint8_t> read_images(const fs::path& path, std::uint64_t& count) {
    GzipReader reader(path);
    std::uint8_t header[16];
    read_header(reader, header);
    check_magic(reader, big_endian_u32(header), FashionMnist::images_magic, "unsigned-byte images");
    count = big_endian_u32(header + 4);
    const std::uint32_t rows = big_endian_u32(header + 8), cols = big_endian_u32(header + 12);
    if (rows != FashionMnist::rows || cols != FashionMnist::cols)
        throw dataset_error(cat(quoted(path), " holds images of ", rows, "×", cols,
                                " pixels; Fashion-MNIST images are ", FashionMnist::rows, "×", FashionMnist::cols));
    return read_payload(reader, count, FashionMnist::pixels_per_image, "images", sizeof header);
}

std::vector<std::uint8_t> read_labels(const fs::path& path) {
    GzipReader reader(path);
    std::uint8_t header[8];
    read_header(reader, header);
    check_magic(reader, big_endian_u32(header), FashionMnist::labels_magic, "unsigned-byte labels");
    const std::uint64_t count = big_endian_u32(header + 4);
    std::vector<std::uint8_t> labels = read_payload(reader, count, 1, "labels", sizeof header);
    const auto bad = std::find_if(labels.begin(), labels.end(), [](std::uint8_t l) { return l >= 10; });
    if (bad != labels.end())
        throw dataset_error(
            cat(quoted(path), ": label ", unsigned{*bad}, " at index ", bad - labels.begin(), " is outside 0..9"));
    return labels;
}

std::string index_error(std::size_t i, std::size_t size) {
    return cat("Fashion-MNIST: index ", i, " is out of range for a dataset of ", size, " examples");
}

} // namespace

std::string_view to_string(Split split) { return split == Split::train ? "train" : "test"; }

FashionMnist FashionMnist::load(const fs::path& dir, Split split) {
    std::error_code ec;
    const fs::file_status status = fs::status(dir, ec);
    if (status.type() == fs::file_type::not_found)
        throw dataset_error(cat("Fashion-MNIST directory ", quoted(dir), " not found", install_hint));
    if (!fs::is_directory(status))
        throw dataset_error(cat("Fashion-MNIST directory ", quoted(dir), " is not a directory", install_hint));
    const std::string prefix = split == Split::train ? "train" : "t10k";
    return load_files(dir / (prefix + "-images-idx3-ubyte.gz"), dir / (prefix + "-labels-idx1-ubyte.gz"));
}

FashionMnist FashionMnist::load_files(const fs::path& images_file, const fs::path& labels_file) {
    std::uint64_t images = 0;
    std::vector<std::uint8_t> pixels = read_images(images_file, images);
    std::vector<std::uint8_t> labels = read_labels(labels_file);
    if (labels.size() != images)
        throw dataset_error(cat("Fashion-MNIST: images file ", quoted(images_file), " holds ", images,
                                " images but labels file ", quoted(labels_file), " holds ", labels.size(),
                                " labels; the counts must agree"));
    return FashionMnist(std::move(pixels), std::move(labels), trusted{});
}

std::span<const std::string_view, FashionMnist::num_classes> FashionMnist::class_names() {
    static constexpr std::array<std::string_view, num_classes> names = {
        "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
    return names;
}

FashionMnist::FashionMnist(std::vector<std::uint8_t> pixels, std::vector<std::uint8_t> labels)
    : pixels_(std::move(pixels)), labels_(std::move(labels)) {
    if (pixels_.size() != labels_.size() * pixels_per_image)
        throw std::invalid_argument(cat("FashionMnist: ", pixels_.size(), " pixel bytes do not make ", labels_.size(),
                                        " images of 28×28 (", labels_.size() * pixels_per_image, " bytes)"));
    const auto bad = std::find_if(labels_.begin(), labels_.end(), [](std::uint8_t l) { return l >= num_classes; });
    if (bad != labels_.end())
        throw std::invalid_argument(
            cat("FashionMnist: label ", unsigned{*bad}, " at index ", bad - labels_.begin(), " is outside 0..9"));
}

FashionMnist::FashionMnist(std::vector<std::uint8_t> pixels, std::vector<std::uint8_t> labels, trusted)
    : pixels_(std::move(pixels)), labels_(std::move(labels)) {}

autodiff::Shape FashionMnist::example_shape() const { return autodiff::Shape{1, rows, cols}; }

void FashionMnist::batch(std::span<const std::size_t> indices, autodiff::Tensor& x,
                         std::vector<std::int32_t>& labels) const {
    for (const std::size_t i : indices)
        if (i >= size()) throw std::out_of_range(index_error(i, size()));
    autodiff::Tensor out = autodiff::Tensor::uninitialized(autodiff::Shape{indices.size(), 1, rows, cols});
    float* dst = out.data<float>().data();
    for (const std::size_t i : indices) {
        const std::uint8_t* src = pixels_.data() + i * pixels_per_image;
        for (std::size_t k = 0; k < pixels_per_image; ++k) dst[k] = static_cast<float>(src[k]) / 255.0f;
        dst += pixels_per_image;
    }
    labels.resize(indices.size());
    for (std::size_t b = 0; b < indices.size(); ++b) labels[b] = labels_[indices[b]];
    x = std::move(out);
}

std::span<const std::uint8_t> FashionMnist::image(std::size_t i) const {
    if (i >= size()) throw std::out_of_range(index_error(i, size()));
    return std::span<const std::uint8_t>(pixels_).subspan(i * pixels_per_image, pixels_per_image);
}

std::int32_t FashionMnist::label(std::size_t i) const {
    if (i >= size()) throw std::out_of_range(index_error(i, size()));
    return labels_[i];
}

} // namespace mixprec::models
