/// \file
/// Readers (and small writers, for tests) for the standard image-classification
/// file formats, into one in-memory ImageSet of uint8 pixels:
///  - IDX (MNIST, Fashion-MNIST): big-endian header {0, 0, type, ndims},
///    ndims uint32 sizes, then the data; plain or gzip-compressed (told apart
///    by the gzip magic number, so a .gz name is not required).
///  - CIFAR-10 binary batches: records of 1 label byte + 3072 pixel bytes
///    (red plane, green, blue; 32x32 each), data_batch_1..5.bin and
///    test_batch.bin.
/// Each reader also takes the file's bytes from memory (the fuzz targets in
/// tests/fuzz use that); the path versions read the file and call it.
/// Every check happens before the data it guards is used: a wrong magic
/// number, an unsupported type, a header whose sizes disagree with the bytes
/// that follow, a truncated or corrupt gzip stream, labels out of range and
/// image/label count mismatches throw IOError naming the file and the fault.
/// Buffers grow with the bytes actually read, never from a header field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ember::nn::data {

/// n images of channels x height x width uint8 pixels (channel-first per
/// image, images back to back) and one label in [0, class_names.size()) each.
struct ImageSet {
  ///@{
  int64_t n = 0, channels = 0, height = 0, width = 0;  ///< images and their size
  ///@}
  std::vector<uint8_t> pixels;           ///< n * image_size() bytes
  std::vector<int64_t> labels;           ///< n labels
  std::vector<std::string> class_names;  ///< one name per class
  std::string name;                      ///< "fashion-mnist", "mnist", "cifar10", ...

  /// Pixels per image.
  int64_t image_size() const { return channels * height * width; }
  /// Number of classes.
  int64_t num_classes() const { return static_cast<int64_t>(class_names.size()); }
  /// The first k images (all when k <= 0 or k >= n): --limit-train for smoke runs.
  ImageSet head(int64_t k) const;
};

/// An IDX array of unsigned bytes (type 0x08, the only type MNIST-style sets use).
struct IdxArray {
  std::vector<int64_t> dims;  ///< the array's shape
  std::vector<uint8_t> data;  ///< its bytes, row-major
};

/// Reads an IDX file, plain or gzip-compressed; every size in the header is
/// checked against the bytes present. Throws IOError naming the file.
IdxArray read_idx(const std::string& path);
/// The same reader over a file's bytes already in memory (plain or gzip);
/// `name` stands for the file in error messages.
IdxArray read_idx_from_memory(const void* data, size_t size, const std::string& name = "<memory>");
/// Writes an unsigned-byte IDX file, gzip-compressed when gzip is true.
void write_idx(const std::string& path, const std::vector<int64_t>& dims, const std::vector<uint8_t>& data, bool gzip);

/// An (n, h, w) images file and an (n) labels file; labels must be < num_classes.
ImageSet read_idx_images(const std::string& images_path, const std::string& labels_path, int64_t num_classes = 10);

/// CIFAR-10 binary batch files, concatenated in the order given.
ImageSet read_cifar10_batches(const std::vector<std::string>& paths);
/// One batch file's bytes already in memory; `name` stands for the file in errors.
ImageSet read_cifar10_from_memory(const void* data, size_t size, const std::string& name = "<memory>");
/// Writes images (3 x 32 x 32, labels < 256) as one CIFAR-10 batch file.
void write_cifar10_batch(const std::string& path, const ImageSet& set);

/// The class names of the known sets.
std::vector<std::string> class_names(const std::string& dataset);

/// Loads the training (train = true) or test split of dataset
/// ("fashion-mnist", "mnist" or "cifar10") from dir:
///  - IDX sets: {train,t10k}-{images-idx3,labels-idx1}-ubyte, with or without .gz
///    (also the "train-images.idx3-ubyte" spelling some downloads use);
///  - cifar10: data_batch_1..5.bin / test_batch.bin in dir or in
///    dir/cifar-10-batches-bin.
/// Missing files throw IOError listing what was looked for.
ImageSet load_dataset(const std::string& dataset, const std::string& dir, bool train);

/// Where the data set is by default: /usr/share/datasets/fashion-mnist
/// (Debian's dataset-fashion-mnist) for fashion-mnist, `data/<name>` otherwise.
std::string default_data_dir(const std::string& dataset);

}  // namespace ember::nn::data
