#pragma once
/// Fashion-MNIST: 70,000 grayscale 28×28 images of clothing in 10 classes (60,000 for training, 10,000
/// for testing), read from the gzip-compressed IDX files that Debian's `dataset-fashion-mnist` installs
/// in /usr/share/datasets/fashion-mnist. The reader treats every file as hostile: it checks the gzip
/// stream, the IDX header and every label, and it never allocates more than the file can really hold.
/// Pixels stay uint8 in memory (47 MB for the training split); batch() turns them into float32 in [0, 1].

#include <mixprec/models/data/dataset.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace mixprec::models {

/// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr const char* default_fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";

/// A dataset file is missing or malformed. The message names the file and says what is wrong with it
/// (not found, empty, not gzip, truncated, corrupt, wrong magic number, wrong image size, counts that
/// disagree, a label out of range), and for a missing file how to install the data.
class dataset_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// Which half of Fashion-MNIST: `train` (60,000 examples) or `test` (10,000; "t10k" in the file names).
enum class Split { train, test };

/// "train" or "test".
std::string_view to_string(Split split);

class FashionMnist final : public Dataset {
  public:
    static constexpr std::size_t rows = 28;
    static constexpr std::size_t cols = 28;
    static constexpr std::size_t pixels_per_image = rows * cols;
    static constexpr std::size_t num_classes = 10;
    static constexpr std::uint32_t images_magic = 2051; ///< IDX: unsigned bytes, 3 dimensions
    static constexpr std::uint32_t labels_magic = 2049; ///< IDX: unsigned bytes, 1 dimension

    /// Reads one split from `dir`: <dir>/train-images-idx3-ubyte.gz and <dir>/train-labels-idx1-ubyte.gz,
    /// or the t10k-* pair for Split::test. dataset_error when the directory or a file is missing (the
    /// message says how to install the package or pass another directory), or when a file is malformed
    /// (see load_files).
    static FashionMnist load(const std::filesystem::path& dir = default_fashion_mnist_dir, Split split = Split::train);

    /// Reads an images file and a labels file, each a gzip-compressed IDX file (several concatenated gzip
    /// members are accepted; anything else after the last one is not). dataset_error naming the file when
    /// it is missing, empty, not gzip, truncated or corrupt (bad deflate data or checksum), has the wrong
    /// magic number (expected 2051 for images, 2049 for labels), holds images other than 28×28, holds
    /// more or fewer bytes than its header promises, or holds a label outside 0..9; and when the two files
    /// hold different numbers of examples. Memory is allocated only as the decompressed data arrives, up
    /// to what the header promises, so a lying header cannot make it allocate without bound.
    static FashionMnist load_files(const std::filesystem::path& images_file, const std::filesystem::path& labels_file);

    /// The ten class names, indexed by label: "T-shirt/top", "Trouser", ..., "Ankle boot".
    static std::span<const std::string_view, num_classes> class_names();

    /// A dataset from raw data: `pixels` holds labels.size() images of 28×28 bytes, row-major, one after
    /// the other. std::invalid_argument when pixels.size() != labels.size() × 784 or a label is > 9.
    FashionMnist(std::vector<std::uint8_t> pixels, std::vector<std::uint8_t> labels);

    std::size_t size() const override { return labels_.size(); }
    /// (1, 28, 28): one channel.
    autodiff::Shape example_shape() const override;
    using Dataset::batch; // and the targets as a float32 tensor
    /// x becomes a new float32 tensor of shape (indices.size(), 1, 28, 28) holding pixel / 255 (so exactly
    /// 0 and 1 at the ends of the range), never one sharing storage with an earlier batch; labels becomes
    /// the labels, as int32. An empty `indices` gives shape (0, 1, 28, 28). std::out_of_range naming the
    /// index and size() when an index is ≥ size(); x and labels are then left unchanged.
    void batch(std::span<const std::size_t> indices, autodiff::Tensor& x,
               std::vector<std::int32_t>& labels) const override;

    /// All images, row-major, example after example (size() × 784 bytes).
    std::span<const std::uint8_t> pixels() const { return pixels_; }
    /// The 784 pixels of example i (checked: std::out_of_range).
    std::span<const std::uint8_t> image(std::size_t i) const;
    /// All labels, each in 0..9.
    std::span<const std::uint8_t> labels() const { return labels_; }
    /// The label of example i (checked: std::out_of_range).
    std::int32_t label(std::size_t i) const;

  private:
    struct trusted {};
    FashionMnist(std::vector<std::uint8_t> pixels, std::vector<std::uint8_t> labels, trusted);

    std::vector<std::uint8_t> pixels_;
    std::vector<std::uint8_t> labels_;
};

} // namespace mixprec::models
