#define BOOST_TEST_MODULE fashion_mnist
#include <boost/test/unit_test.hpp>

#include <mixprec/mixprec.hpp>

#include <mixprec/models/data/fashion_mnist.hpp>

#include "op_checks.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

using mixprec::autodiff::Shape;
using mixprec::autodiff::Tensor;
using mixprec::models::dataset_error;
using mixprec::models::FashionMnist;
using mixprec::models::Split;
using op_checks::throws_with;

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

namespace {

// ---- Writing gzip IDX files without zlib: stored (uncompressed) deflate blocks, RFC 1951 §3.2.4 ----

std::uint32_t crc32(const Bytes& data) {
    static const auto table = [] {
        std::array<std::uint32_t, 256> t{};
        for (std::uint32_t n = 0; n < 256; ++n) {
            std::uint32_t c = n;
            for (int k = 0; k < 8; ++k) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            t[n] = c;
        }
        return t;
    }();
    std::uint32_t c = 0xffffffffu;
    for (const std::uint8_t b : data) c = table[(c ^ b) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

void put_le32(Bytes& out, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

void put_be32(Bytes& out, std::uint32_t v) {
    for (int i = 3; i >= 0; --i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

/// One gzip member holding `data` in stored blocks of at most `block` bytes.
Bytes gzip(const Bytes& data, std::size_t block = 65535) {
    Bytes out = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
    std::size_t pos = 0;
    do {
        const std::size_t len = std::min(block, data.size() - pos);
        const bool last = pos + len == data.size();
        out.push_back(last ? 1 : 0); // BFINAL, BTYPE = 00 (stored), then padding to the byte
        out.push_back(static_cast<std::uint8_t>(len));
        out.push_back(static_cast<std::uint8_t>(len >> 8));
        out.push_back(static_cast<std::uint8_t>(~len));
        out.push_back(static_cast<std::uint8_t>(~len >> 8));
        out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(pos),
                   data.begin() + static_cast<std::ptrdiff_t>(pos + len));
        pos += len;
    } while (pos < data.size());
    put_le32(out, crc32(data));
    put_le32(out, static_cast<std::uint32_t>(data.size()));
    return out;
}

/// Uncompressed IDX images file: header (magic, count, rows, cols) then `pixels`.
Bytes idx_images(std::uint32_t count, const Bytes& pixels, std::uint32_t rows = 28, std::uint32_t cols = 28,
                 std::uint32_t magic = 2051) {
    Bytes out;
    put_be32(out, magic);
    put_be32(out, count);
    put_be32(out, rows);
    put_be32(out, cols);
    out.insert(out.end(), pixels.begin(), pixels.end());
    return out;
}

Bytes idx_labels(std::uint32_t count, const Bytes& labels, std::uint32_t magic = 2049) {
    Bytes out;
    put_be32(out, magic);
    put_be32(out, count);
    out.insert(out.end(), labels.begin(), labels.end());
    return out;
}

/// n images whose pixel k of image i is (7 i + k) mod 256, so every byte value appears.
Bytes pattern_pixels(std::size_t n) {
    Bytes p(n * 784);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::uint8_t>((7 * (i / 784) + i % 784) % 256);
    return p;
}

/// A scratch directory, removed at the end of the test.
struct TempDir {
    fs::path path;
    TempDir() {
        static int counter = 0;
        std::string name = "mixprec_fashion_mnist_";
        name += std::to_string(::getpid());
        name += "_";
        name += std::to_string(counter++);
        path = fs::temp_directory_path() / name;
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    fs::path write(const std::string& name, const Bytes& bytes) const {
        const fs::path p = path / name;
        std::ofstream f(p, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        BOOST_REQUIRE(f.good());
        return p;
    }
    /// A train split: images file and labels file.
    void write_split(const Bytes& images_gz, const Bytes& labels_gz) const {
        write("train-images-idx3-ubyte.gz", images_gz);
        write("train-labels-idx1-ubyte.gz", labels_gz);
    }
};

const Bytes three_labels = {4, 0, 9};

/// A valid train split of three images in `dir`.
void write_valid_split(const TempDir& dir) {
    dir.write_split(gzip(idx_images(3, pattern_pixels(3))), gzip(idx_labels(3, three_labels)));
}

/// True when loading the train split of `dir` throws dataset_error whose message holds every part.
bool load_fails(const TempDir& dir, std::initializer_list<const char*> parts) {
    return throws_with<dataset_error>([&] { FashionMnist::load(dir.path, Split::train); }, parts);
}

// ---- The installed dataset ----

bool data_installed() {
    const bool present = fs::is_directory(mixprec::models::default_fashion_mnist_dir);
    if (std::getenv("MIXPREC_REQUIRE_DATA") != nullptr)
        BOOST_REQUIRE_MESSAGE(present, "MIXPREC_REQUIRE_DATA is set but " << mixprec::models::default_fashion_mnist_dir
                                                                          << " does not exist");
    if (!present) BOOST_TEST_MESSAGE("Fashion-MNIST is not installed; checking the error message only");
    return present;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

const FashionMnist& train_split() {
    static const FashionMnist data = [] {
        const auto start = std::chrono::steady_clock::now();
        FashionMnist d = FashionMnist::load();
        BOOST_TEST_MESSAGE("loaded the train split in " << seconds_since(start) << " s");
        return d;
    }();
    return data;
}

const FashionMnist& test_split() {
    static const FashionMnist data = FashionMnist::load(mixprec::models::default_fashion_mnist_dir, Split::test);
    return data;
}

} // namespace

BOOST_AUTO_TEST_CASE(missing_installation_is_explained) {
    const fs::path dir = fs::temp_directory_path() / "mixprec_no_such_fashion_mnist_dir";
    BOOST_TEST(throws_with<dataset_error>([&] { FashionMnist::load(dir); },
                                          {"mixprec_no_such_fashion_mnist_dir", "not found",
                                           "sudo apt-get install dataset-fashion-mnist", "--data DIR"}));
    if (!data_installed())
        BOOST_TEST(throws_with<dataset_error>([] { FashionMnist::load(); },
                                              {"/usr/share/datasets/fashion-mnist", "not found", "apt-get install"}));
}

BOOST_AUTO_TEST_CASE(both_splits_load_with_their_counts) {
    if (!data_installed()) return;
    const FashionMnist& train = train_split();
    const FashionMnist& test = test_split();
    BOOST_TEST(train.size() == 60000u);
    BOOST_TEST(test.size() == 10000u);
    BOOST_TEST(train.pixels().size() == 60000u * 784u);
    BOOST_TEST(test.pixels().size() == 10000u * 784u);
    BOOST_TEST(train.example_shape() == (Shape{1, 28, 28}));
    BOOST_TEST(FashionMnist::class_names().size() == 10u);
    BOOST_TEST(FashionMnist::class_names()[0] == "T-shirt/top");
    BOOST_TEST(FashionMnist::class_names()[9] == "Ankle boot");
}

BOOST_AUTO_TEST_CASE(every_class_is_balanced) {
    if (!data_installed()) return;
    for (const auto& [data, per_class] : {std::pair{&train_split(), 6000}, std::pair{&test_split(), 1000}}) {
        std::array<int, 10> histogram{};
        for (const std::uint8_t l : data->labels()) ++histogram.at(l);
        for (int c = 0; c < 10; ++c) BOOST_TEST(histogram[c] == per_class, "class " << c);
    }
}

// The expected values were computed with Python's gzip module and NumPy:
//   x = np.frombuffer(gzip.open(d + "train-images-idx3-ubyte.gz").read(), np.uint8, offset=16).reshape(-1, 28, 28)
//   y = np.frombuffer(gzip.open(d + "train-labels-idx1-ubyte.gz").read(), np.uint8, offset=8)
// (and the same for t10k): y[:10], x[0].sum(), x[0, 14, 14], x[-1].sum(), x[12345 % n, 14, 10:15],
// and x.sum(dtype=np.uint64) over the whole split.
BOOST_AUTO_TEST_CASE(spot_checks_match_python) {
    if (!data_installed()) return;
    const FashionMnist& train = train_split();
    const FashionMnist& test = test_split();
    const auto image_sum = [](const FashionMnist& d, std::size_t i) {
        std::uint64_t s = 0;
        for (const std::uint8_t p : d.image(i)) s += p;
        return s;
    };
    const auto total = [](const FashionMnist& d) {
        std::uint64_t s = 0;
        for (const std::uint8_t p : d.pixels()) s += p;
        return s;
    };
    const std::vector<int> train_first = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5}, test_first = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
    for (std::size_t i = 0; i < 10; ++i) {
        BOOST_TEST(train.label(i) == train_first[i]);
        BOOST_TEST(test.label(i) == test_first[i]);
    }
    BOOST_TEST(image_sum(train, 0) == 76247u);
    BOOST_TEST(train.image(0)[14 * 28 + 14] == 217);
    BOOST_TEST(image_sum(train, 59999) == 16684u);
    BOOST_TEST(train.label(59999) == 5);
    const std::vector<int> train_row = {187, 193, 190, 191, 193}, test_row = {202, 146, 199, 255, 217};
    for (std::size_t k = 0; k < 5; ++k) {
        BOOST_TEST(train.image(12345)[14 * 28 + 10 + k] == train_row[k]);
        BOOST_TEST(test.image(2345)[14 * 28 + 10 + k] == test_row[k]);
    }
    BOOST_TEST(train.label(12345) == 8);
    BOOST_TEST(test.label(2345) == 3);
    BOOST_TEST(image_sum(test, 0) == 33456u);
    BOOST_TEST(test.image(0)[14 * 28 + 14] == 110);
    BOOST_TEST(image_sum(test, 9999) == 24390u);
    BOOST_TEST(total(train) == 3431114169u);
    BOOST_TEST(total(test) == 573469082u);
}

BOOST_AUTO_TEST_CASE(batch_normalizes_pixels_in_index_order) {
    if (!data_installed()) return;
    const FashionMnist& train = train_split();
    const std::vector<std::size_t> indices = {12345, 0, 59999, 0};
    Tensor x;
    std::vector<std::int32_t> labels = {42};
    train.batch(indices, x, labels);
    BOOST_TEST(x.dtype() == mixprec::autodiff::Dtype::float32);
    BOOST_TEST(x.shape() == (Shape{4, 1, 28, 28}));
    BOOST_TEST(labels == (std::vector<std::int32_t>{8, 9, 5, 9}), boost::test_tools::per_element());
    const std::span<const float> v = x.data<float>();
    bool exact = true, seen_zero = false, seen_one = false;
    for (std::size_t b = 0; b < indices.size(); ++b)
        for (std::size_t k = 0; k < 784; ++k) {
            const float got = v[b * 784 + k];
            exact = exact && got == static_cast<float>(train.image(indices[b])[k]) / 255.0f;
            seen_zero = seen_zero || got == 0.0f;
            seen_one = seen_one || got == 1.0f;
            BOOST_REQUIRE(got >= 0.0f && got <= 1.0f);
        }
    BOOST_TEST(exact);
    BOOST_TEST(seen_zero);
    BOOST_TEST(seen_one); // image 0 has a 255 pixel
    BOOST_TEST(x.at({0, 0, 14, 10}) == 187.0f / 255.0f);

    // A new batch gets new storage: the earlier batch (perhaps still on a tape) keeps its values.
    const Tensor first = x;
    train.batch(std::vector<std::size_t>{1}, x, labels);
    BOOST_TEST(!x.shares_storage_with(first));
    BOOST_TEST(first.at({0, 0, 14, 10}) == 187.0f / 255.0f);
    BOOST_TEST(x.shape() == (Shape{1, 1, 28, 28}));

    // An empty batch, and a bad index that leaves x and labels as they were.
    train.batch({}, x, labels);
    BOOST_TEST(x.shape() == (Shape{0, 1, 28, 28}));
    BOOST_TEST(labels.empty());
    train.batch(std::vector<std::size_t>{3}, x, labels);
    BOOST_TEST(throws_with<std::out_of_range>(
        [&] {
            train.batch(std::vector<std::size_t>{5, 60000}, x, labels);
        },
        {"index 60000", "60000 examples"}));
    BOOST_TEST(x.shape() == (Shape{1, 1, 28, 28}));
    BOOST_TEST(labels.size() == 1u);
    BOOST_TEST(throws_with<std::out_of_range>([&] { (void)train.image(60000); }, {"60000"}));
    BOOST_TEST(throws_with<std::out_of_range>([&] { (void)train.label(70000); }, {"70000"}));
}

BOOST_AUTO_TEST_CASE(random_batches_are_cheap) {
    if (!data_installed()) return;
    const FashionMnist& train = train_split();
    std::mt19937_64 gen(5);
    std::uniform_int_distribution<std::size_t> pick(0, train.size() - 1);
    std::vector<std::size_t> indices(128);
    Tensor x;
    std::vector<std::int32_t> labels;
    double checksum = 0;
    const auto start = std::chrono::steady_clock::now();
    constexpr int batches = 200;
    for (int r = 0; r < batches; ++r) {
        for (auto& i : indices) i = pick(gen);
        train.batch(indices, x, labels);
        checksum += x.flat(r % x.size());
    }
    BOOST_TEST_MESSAGE("batch of 128: " << seconds_since(start) / batches * 1e6 << " us (checksum " << checksum << ")");
    BOOST_TEST(labels.size() == 128u);
}

// ---- Files written here: valid ones, and every kind of broken one ----

BOOST_AUTO_TEST_CASE(small_valid_files_round_trip) {
    const TempDir dir;
    write_valid_split(dir);
    const FashionMnist d = FashionMnist::load(dir.path, Split::train);
    BOOST_TEST(d.size() == 3u);
    BOOST_TEST(d.pixels().size() == 3u * 784u);
    const Bytes expected = pattern_pixels(3);
    BOOST_TEST(std::equal(d.pixels().begin(), d.pixels().end(), expected.begin()));
    BOOST_TEST(d.label(0) == 4);
    BOOST_TEST(d.label(2) == 9);

    // Several gzip members, and many small stored blocks, give the same data; zero examples are allowed.
    const Bytes images = idx_images(3, expected);
    Bytes two_members = gzip(Bytes(images.begin(), images.begin() + 100), 7);
    const Bytes rest = gzip(Bytes(images.begin() + 100, images.end()), 1000);
    two_members.insert(two_members.end(), rest.begin(), rest.end());
    const fs::path im = dir.write("two_members.gz", two_members);
    const fs::path lb = dir.write("labels.gz", gzip(idx_labels(3, three_labels), 1));
    const FashionMnist again = FashionMnist::load_files(im, lb);
    BOOST_TEST(std::equal(again.pixels().begin(), again.pixels().end(), expected.begin()));
    const FashionMnist none = FashionMnist::load_files(dir.write("i0.gz", gzip(idx_images(0, {}))),
                                                       dir.write("l0.gz", gzip(idx_labels(0, {}))));
    BOOST_TEST(none.size() == 0u);

    // The test split reads the t10k files.
    dir.write("t10k-images-idx3-ubyte.gz", gzip(idx_images(1, pattern_pixels(1))));
    dir.write("t10k-labels-idx1-ubyte.gz", gzip(idx_labels(1, {7})));
    BOOST_TEST(FashionMnist::load(dir.path, Split::test).label(0) == 7);
}

BOOST_AUTO_TEST_CASE(missing_directory_and_files) {
    const TempDir dir;
    BOOST_TEST(load_fails(dir, {"train-images-idx3-ubyte.gz", "not found", "apt-get install dataset-fashion-mnist"}));
    dir.write("train-images-idx3-ubyte.gz", gzip(idx_images(3, pattern_pixels(3))));
    BOOST_TEST(load_fails(dir, {"train-labels-idx1-ubyte.gz", "not found", "--data DIR"}));
    const fs::path file = dir.write("plain", {1, 2, 3});
    BOOST_TEST(throws_with<dataset_error>([&] { FashionMnist::load(file); }, {"plain", "is not a directory"}));
    BOOST_TEST(throws_with<dataset_error>([&] { FashionMnist::load_files(dir.path, file); },
                                          {"is a directory", "not a gzip file"}));
}

BOOST_AUTO_TEST_CASE(empty_and_non_gzip_files) {
    const TempDir dir;
    dir.write_split({}, gzip(idx_labels(3, three_labels)));
    BOOST_TEST(load_fails(dir, {"train-images-idx3-ubyte.gz", "is empty", "0 bytes"}));
    dir.write_split(idx_images(3, pattern_pixels(3)), gzip(idx_labels(3, three_labels))); // not compressed
    BOOST_TEST(load_fails(dir, {"train-images-idx3-ubyte.gz", "not a gzip file", "00 00"}));
    dir.write_split(gzip(idx_images(3, pattern_pixels(3))), Bytes{0x1f, 0x8c, 8, 0});
    BOOST_TEST(load_fails(dir, {"train-labels-idx1-ubyte.gz", "not a gzip file", "1f 8c"}));
    dir.write_split(gzip({}), gzip(idx_labels(3, three_labels))); // a gzip stream of nothing
    BOOST_TEST(load_fails(dir, {"holds no data", "IDX header of 16 bytes"}));
    dir.write_split(gzip(Bytes(10, 0)), gzip(idx_labels(3, three_labels)));
    BOOST_TEST(load_fails(dir, {"truncated", "IDX header needs 16 bytes", "only 10"}));
}

BOOST_AUTO_TEST_CASE(truncated_files) {
    const Bytes images = gzip(idx_images(3, pattern_pixels(3)));
    const Bytes labels = gzip(idx_labels(3, three_labels));
    // Inside the gzip header, inside a block header, inside the IDX header, in the pixels, at the end of
    // the data (trailer missing), halfway through the checksum, in the size field.
    const std::vector<std::size_t> offsets = {
        1, 2, 5, 10, 12, 14, 20, 30, 1000, images.size() - 8, images.size() - 6, images.size() - 1};
    for (const std::size_t cut : offsets) {
        const TempDir dir;
        dir.write_split(Bytes(images.begin(), images.begin() + static_cast<std::ptrdiff_t>(cut)), labels);
        BOOST_TEST(load_fails(dir, {"train-images-idx3-ubyte.gz", "truncated"}), "images cut at " << cut);
    }
    for (const std::size_t cut : {std::size_t{3}, std::size_t{16}, labels.size() - 4}) {
        const TempDir dir;
        dir.write_split(images, Bytes(labels.begin(), labels.begin() + static_cast<std::ptrdiff_t>(cut)));
        BOOST_TEST(load_fails(dir, {"train-labels-idx1-ubyte.gz", "truncated"}), "labels cut at " << cut);
    }
}

BOOST_AUTO_TEST_CASE(corrupt_and_trailing_data) {
    const TempDir dir;
    Bytes images = gzip(idx_images(3, pattern_pixels(3)));
    images[40] ^= 0x10; // a pixel byte: the CRC-32 no longer matches
    dir.write_split(images, gzip(idx_labels(3, three_labels)));
    BOOST_TEST(load_fails(dir, {"train-images-idx3-ubyte.gz", "corrupt", "incorrect data check"}));

    images = gzip(idx_images(3, pattern_pixels(3)));
    images[10] = 0x07; // block type 11: reserved
    dir.write_split(images, gzip(idx_labels(3, three_labels)));
    BOOST_TEST(load_fails(dir, {"corrupt", "invalid block type"}));

    images = gzip(idx_images(3, pattern_pixels(3)));
    images.insert(images.end(), {0, 0, 0});
    dir.write_split(images, gzip(idx_labels(3, three_labels)));
    std::string offset = "offset ";
    offset += std::to_string(images.size() - 3);
    BOOST_TEST(load_fails(dir, {"trailing data", "00 00", offset.c_str()}));
}

BOOST_AUTO_TEST_CASE(wrong_magic_numbers) {
    const TempDir dir;
    dir.write_split(gzip(idx_images(3, pattern_pixels(3), 28, 28, 2049)), gzip(idx_labels(3, three_labels)));
    BOOST_TEST(load_fails(dir, {"train-images-idx3-ubyte.gz", "magic number 2049", "expected 2051", "labels file"}));
    dir.write_split(gzip(idx_images(3, pattern_pixels(3), 28, 28, 0x12345678)), gzip(idx_labels(3, three_labels)));
    BOOST_TEST(load_fails(dir, {"magic number 305419896", "expected 2051"}));
    dir.write_split(gzip(idx_images(3, pattern_pixels(3))), gzip(idx_labels(3, three_labels, 2051)));
    BOOST_TEST(load_fails(dir, {"train-labels-idx1-ubyte.gz", "magic number 2051", "expected 2049"}));
}

BOOST_AUTO_TEST_CASE(wrong_image_size) {
    const TempDir dir;
    dir.write_split(gzip(idx_images(3, Bytes(3 * 29 * 28, 1), 29, 28)), gzip(idx_labels(3, three_labels)));
    BOOST_TEST(load_fails(dir, {"train-images-idx3-ubyte.gz", "29×28", "28×28"}));
    dir.write_split(gzip(idx_images(3, pattern_pixels(3), 28, 0)), gzip(idx_labels(3, three_labels)));
    BOOST_TEST(load_fails(dir, {"28×0"}));
}

BOOST_AUTO_TEST_CASE(counts_that_disagree_with_the_data) {
    const TempDir dir;
    // Header promises 5 images, 3 follow.
    dir.write_split(gzip(idx_images(5, pattern_pixels(3))), gzip(idx_labels(5, {1, 2, 3, 4, 5})));
    BOOST_TEST(
        load_fails(dir, {"truncated", "promises 5 images", "the file holds only 2352 bytes", "3 complete images"}));
    // Header promises 2^32 - 1 images: refused from the file size alone, before allocating anything.
    dir.write_split(gzip(idx_images(0xffffffffu, pattern_pixels(3))), gzip(idx_labels(3, three_labels)));
    BOOST_TEST(load_fails(dir, {"promises 4294967295 images", "cannot hold that much"}));
    dir.write_split(gzip(idx_images(3, pattern_pixels(3))), gzip(idx_labels(0xfffffff0u, three_labels)));
    BOOST_TEST(load_fails(dir, {"train-labels-idx1-ubyte.gz", "promises 4294967280 labels", "cannot hold"}));
    // More data than the header says.
    dir.write_split(gzip(idx_images(2, pattern_pixels(3))), gzip(idx_labels(2, {1, 2})));
    BOOST_TEST(load_fails(dir, {"more data than", "promises 2 images"}));
    // Images and labels disagree.
    dir.write_split(gzip(idx_images(3, pattern_pixels(3))), gzip(idx_labels(4, {1, 2, 3, 4})));
    BOOST_TEST(load_fails(dir, {"holds 3 images", "holds 4 labels", "must agree"}));
}

BOOST_AUTO_TEST_CASE(labels_outside_the_classes) {
    const TempDir dir;
    dir.write_split(gzip(idx_images(3, pattern_pixels(3))), gzip(idx_labels(3, {0, 9, 10})));
    BOOST_TEST(load_fails(dir, {"train-labels-idx1-ubyte.gz", "label 10 at index 2", "outside 0..9"}));
    dir.write_split(gzip(idx_images(3, pattern_pixels(3))), gzip(idx_labels(3, {255, 0, 0})));
    BOOST_TEST(load_fails(dir, {"label 255 at index 0"}));
}

// Every single-byte corruption of a small valid file either still loads (a changed pixel in a stored
// block is caught by the CRC, so only bytes zlib ignores, such as the mtime, survive) or is a dataset_error.
BOOST_AUTO_TEST_CASE(random_corruptions_never_crash) {
    const Bytes images = gzip(idx_images(2, pattern_pixels(2)), 500);
    const Bytes labels = gzip(idx_labels(2, {3, 4}));
    const TempDir dir;
    std::mt19937 gen(11);
    int loaded = 0, rejected = 0;
    for (int trial = 0; trial < 300; ++trial) {
        Bytes im = images, lb = labels;
        Bytes& target = trial % 4 == 0 ? lb : im;
        std::uniform_int_distribution<std::size_t> where(0, target.size() - 1);
        target[where(gen)] ^= static_cast<std::uint8_t>(1u << (gen() % 8));
        dir.write_split(im, lb);
        try {
            const FashionMnist d = FashionMnist::load(dir.path);
            BOOST_TEST(d.size() == 2u);
            ++loaded;
        } catch (const dataset_error&) {
            ++rejected;
        }
    }
    BOOST_TEST_MESSAGE(loaded << " loaded, " << rejected << " rejected");
    BOOST_TEST(rejected > 250);
}

BOOST_AUTO_TEST_CASE(raw_constructor_checks_its_arguments) {
    const FashionMnist d(pattern_pixels(2), {1, 2});
    BOOST_TEST(d.size() == 2u);
    Tensor x;
    std::vector<std::int32_t> labels;
    d.batch(std::vector<std::size_t>{1}, x, labels);
    BOOST_TEST(x.at({0, 0, 0, 0}) == 7.0f / 255.0f);
    BOOST_TEST(labels.at(0) == 2);
    BOOST_TEST(throws_with<std::invalid_argument>([] { (void)FashionMnist(pattern_pixels(2), {1}); },
                                                  {"1568 pixel bytes", "1 images"}));
    BOOST_TEST(throws_with<std::invalid_argument>([] { (void)FashionMnist(pattern_pixels(1), {10}); },
                                                  {"label 10", "outside 0..9"}));
    BOOST_TEST(mixprec::models::to_string(Split::test) == "test");
}
