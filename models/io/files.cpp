#include <mixprec/models/io/files.hpp>

#include <cerrno>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mixprec::models {
namespace {

[[noreturn]] void fail(const std::string& message) { throw file_error(message); }

std::string system_reason(int error) { return std::generic_category().message(error); }

/// Closes the descriptor it owns.
class FileDescriptor {
  public:
    explicit FileDescriptor(int fd) : fd_(fd) {}
    ~FileDescriptor() {
        if (fd_ >= 0) ::close(fd_);
    }
    FileDescriptor(const FileDescriptor&) = delete;
    FileDescriptor& operator=(const FileDescriptor&) = delete;
    int get() const { return fd_; }
    /// Closes now, returning close()'s result.
    int close() {
        const int r = ::close(fd_);
        fd_ = -1;
        return r;
    }

  private:
    int fd_;
};

std::filesystem::path numbered(const std::filesystem::path& path, std::size_t i) {
    std::string name = path.filename().string();
    name += '.';
    name += std::to_string(i);
    return path.parent_path() / name;
}

/// Renames path.(K-2) → path.(K-1), …, path.1 → path.2 and links (or copies) path to path.1.
void rotate(const std::filesystem::path& path, std::size_t keep_last) {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (std::size_t i = keep_last - 1; i >= 2; --i) {
        const fs::path from = numbered(path, i - 1);
        if (!fs::exists(from, ec)) continue;
        fs::rename(from, numbered(path, i), ec);
        if (ec) fail("cannot rename " + from.string() + ": " + ec.message());
    }
    if (!fs::exists(path, ec)) return;
    const fs::path first = numbered(path, 1);
    fs::remove(first, ec);
    if (ec) fail("cannot remove " + first.string() + ": " + ec.message());
    fs::create_hard_link(path, first, ec);
    if (ec) {
        ec.clear();
        fs::copy_file(path, first, fs::copy_options::overwrite_existing, ec);
        if (ec) fail("cannot copy to " + first.string() + ": " + ec.message());
    }
}

void fsync_directory(const std::filesystem::path& dir) {
    FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.get() < 0) fail("cannot open directory " + dir.string() + ": " + system_reason(errno));
    if (::fsync(fd.get()) != 0 && errno != EINVAL) // EINVAL: the file system cannot sync directories
        fail("cannot sync directory " + dir.string() + ": " + system_reason(errno));
}

} // namespace

std::vector<std::uint8_t> read_file_bounded(const std::filesystem::path& path, std::uint64_t max_bytes) {
    FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) fail("cannot open: " + system_reason(errno));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) fail("cannot stat: " + system_reason(errno));
    if (!S_ISREG(st.st_mode)) fail("not a regular file");
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size > max_bytes) fail(std::to_string(size) + " bytes exceeds the limit of " + std::to_string(max_bytes));
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("cannot read: " + system_reason(errno));
        if (n == 0) break; // the file shrank
        done += static_cast<std::size_t>(n);
    }
    bytes.resize(done);
    return bytes;
}

void write_file_atomically(const std::filesystem::path& path, std::span<const std::uint8_t> bytes,
                           std::size_t keep_last) {
    if (keep_last == 0) throw std::invalid_argument("write_file_atomically: keep_last must be ≥ 1, got 0");
    std::filesystem::path tmp = path;
    tmp += ".tmp";
    bool created = false;
    try {
        FileDescriptor fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (fd.get() < 0) fail("cannot create " + tmp.string() + ": " + system_reason(errno));
        created = true;
        std::size_t done = 0;
        while (done < bytes.size()) {
            const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) fail("cannot write " + tmp.string() + ": " + system_reason(errno));
            done += static_cast<std::size_t>(n);
        }
        if (::fsync(fd.get()) != 0) fail("cannot sync " + tmp.string() + ": " + system_reason(errno));
        if (fd.close() != 0) fail("cannot close " + tmp.string() + ": " + system_reason(errno));
        if (keep_last > 1) rotate(path, keep_last);
        if (::rename(tmp.c_str(), path.c_str()) != 0)
            fail("cannot rename " + tmp.string() + " to " + path.string() + ": " + system_reason(errno));
        created = false;
    } catch (...) {
        if (created) ::unlink(tmp.c_str());
        throw;
    }
    const std::filesystem::path dir = path.parent_path();
    fsync_directory(dir.empty() ? std::filesystem::path(".") : dir);
}

} // namespace mixprec::models
