// IDX and CIFAR-10 readers and writers. A file is read whole into memory and
// parsed there (the path and in-memory versions are one reader); gzip IDX
// data is inflated with zlib as it is read, so plain and gzip files share one
// path. Sizes claimed by a header are checked against the bytes actually
// present before anything is kept (see data_readers.h).
#include <ember/nn/data_readers.h>

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <system_error>

#include <ember/core/error.h>
#include <ember/core/file_io.h>

namespace ember::nn::data {

namespace fs = std::filesystem;

ImageSet ImageSet::head(int64_t k) const {
  if (k <= 0 || k >= n) return *this;
  ImageSet s = *this;
  s.n = k;
  s.pixels.resize(static_cast<size_t>(k * image_size()));
  s.labels.resize(static_cast<size_t>(k));
  return s;
}

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzPtr = std::unique_ptr<gzFile_s, GzCloser>;

GzPtr open_gz(const std::string& path, const char* mode) {
  GzPtr f(gzopen(path.c_str(), mode));
  EMBER_CHECK(f != nullptr, IOError, path, ": cannot open",
              mode[0] == 'r' ? " for reading: " : " for writing: ", std::strerror(errno));
  return f;
}

uint32_t big_endian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Largest file or array the readers accept: far beyond any image set, small
// enough that the products below cannot overflow.
constexpr int64_t kMaxBytes = int64_t{1} << 36;

// A whole file, in a buffer sized by the file (never by a header in it).
std::vector<uint8_t> read_data_file(const std::string& path) {
  require_regular_file(path, "data file");  // a FIFO would block, a directory misread
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  EMBER_CHECK(!ec, IOError, path, ": cannot read its size (", ec.message(), ")");
  EMBER_CHECK(size <= static_cast<uintmax_t>(kMaxBytes), IOError, path, ": ", size,
              " bytes is more than the data readers accept (", kMaxBytes, ")");
  std::ifstream f(path, std::ios::binary);
  EMBER_CHECK(f.good(), IOError, path, ": cannot open for reading: ", std::strerror(errno));
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  EMBER_CHECK(static_cast<uintmax_t>(f.gcount()) == size, IOError, path, ": read ", f.gcount(), " of ", size, " bytes");
  return bytes;
}

// The bytes of an IDX file in memory as they decompress. Data starting with
// the gzip magic number (1f 8b) is inflated member after member, as gzip -d
// and zlib's gzread do, and bytes after a member that start no new one are
// ignored (gzread's rule for trailing garbage); anything else is read as is.
// A corrupt or truncated stream throws IOError naming the file.
class IdxBytes {
 public:
  IdxBytes(const uint8_t* data, size_t size, const std::string& name)
      : in_(data), left_(size), name_(name), gzip_(size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    if (gzip_) {
      // 16 + MAX_WBITS: a gzip header and trailer (CRC-32 and length, checked).
      EMBER_CHECK(inflateInit2(&zs_, 16 + MAX_WBITS) == Z_OK, IOError, name, ": zlib could not start");
      zs_.next_in = const_cast<Bytef*>(in_);  // zlib's API is not const; it never writes input
      zs_.avail_in = 0;
    }
  }
  ~IdxBytes() {
    if (gzip_) inflateEnd(&zs_);
  }
  IdxBytes(const IdxBytes&) = delete;
  IdxBytes& operator=(const IdxBytes&) = delete;

  // Copies up to n bytes into dst; fewer only at the end of the data.
  size_t read(uint8_t* dst, size_t n) {
    if (!gzip_) {
      const size_t k = std::min(n, left_);
      if (k) std::memcpy(dst, in_, k);
      in_ += k, left_ -= k;
      return k;
    }
    size_t got = 0;
    while (got < n && !ended_) {
      // zlib counts in 32-bit units: hand it the input a GiB at a time. The
      // input is one buffer, so next_in + avail_in == in_ throughout.
      if (zs_.avail_in == 0 && left_ > 0) {
        const size_t k = std::min<size_t>(left_, size_t{1} << 30);
        zs_.avail_in = static_cast<uInt>(k);
        in_ += k, left_ -= k;
      }
      const size_t ask = std::min<size_t>(n - got, size_t{1} << 30);
      zs_.next_out = dst + got;
      zs_.avail_out = static_cast<uInt>(ask);
      const int r = inflate(&zs_, Z_NO_FLUSH);
      got += ask - zs_.avail_out;
      if (r == Z_STREAM_END) {
        const size_t rest = zs_.avail_in + left_;
        if (rest >= 2 && zs_.next_in[0] == 0x1f && zs_.next_in[1] == 0x8b)
          inflateReset(&zs_);  // another member follows
        else
          ended_ = true;
      } else if (r == Z_BUF_ERROR && zs_.avail_in == 0 && left_ == 0) {
        throw IOError(detail::cat_str(name_, ": truncated gzip data (the stream ends before its end marker)"));
      } else if (r != Z_OK) {
        throw IOError(detail::cat_str(name_, ": corrupt gzip data (zlib: ", zs_.msg ? zs_.msg : zError(r), ")"));
      }
    }
    return got;
  }

 private:
  const uint8_t* in_;  // input not yet handed to zlib
  size_t left_;
  const std::string& name_;
  bool gzip_, ended_ = false;
  z_stream zs_{};
};

}  // namespace

IdxArray read_idx(const std::string& path) {
  const std::vector<uint8_t> bytes = read_data_file(path);
  return read_idx_from_memory(bytes.data(), bytes.size(), path);
}

IdxArray read_idx_from_memory(const void* data, size_t size, const std::string& name) {
  IdxBytes in(static_cast<const uint8_t*>(data), size, name);
  std::array<uint8_t, 4> magic{};
  EMBER_CHECK(in.read(magic.data(), 4) == 4, IOError, name, ": truncated IDX file (fewer than 4 header bytes)");
  EMBER_CHECK(magic[0] == 0 && magic[1] == 0, IOError, name, ": not an IDX file (magic number starts ", int{magic[0]},
              ", ", int{magic[1]}, ", expected 0, 0)");
  EMBER_CHECK(magic[2] == 0x08, IOError, name, ": IDX element type 0x", std::hex, int{magic[2]},
              " is not supported (expected 0x08, unsigned byte)");
  const int ndims = magic[3];
  EMBER_CHECK(ndims >= 1 && ndims <= 4, IOError, name, ": IDX file with ", ndims, " dims (expected 1 to 4)");
  std::array<uint8_t, 16> raw{};
  EMBER_CHECK(in.read(raw.data(), static_cast<size_t>(4 * ndims)) == static_cast<size_t>(4 * ndims), IOError, name,
              ": truncated IDX header (", ndims, " dims announced)");
  IdxArray a;
  int64_t expected = 1;
  for (int d = 0; d < ndims; ++d) {
    const int64_t size = big_endian32(raw.data() + 4 * d);
    EMBER_CHECK(size > 0, IOError, name, ": IDX dim ", d, " has size 0");
    // expected * size <= kMaxBytes, checked without overflowing.
    EMBER_CHECK(size <= kMaxBytes / expected, IOError, name, ": IDX header claims more than ", kMaxBytes, " bytes");
    expected *= size;
    a.dims.push_back(size);
  }
  // Read what is there (at most one byte past the claim, to detect extra
  // data), growing the buffer with the bytes that arrive, from 64 KiB and
  // doubling, rather than trusting the header.
  size_t have = 0;
  const size_t want = static_cast<size_t>(expected) + 1;
  while (have < want) {
    const size_t ask = std::min(std::max(have, size_t{1} << 16), want - have);
    a.data.resize(have + ask);
    const size_t got = in.read(a.data.data() + have, ask);
    have += got;
    if (got < ask) break;
  }
  a.data.resize(have);
  EMBER_CHECK(have == static_cast<size_t>(expected), IOError, name, ": header says ", expected,
              " data bytes, the file ", have < static_cast<size_t>(expected) ? "holds only " : "holds more than ",
              have < static_cast<size_t>(expected) ? std::to_string(have) : std::to_string(expected),
              have < static_cast<size_t>(expected) ? " (truncated)" : "");
  return a;
}

void write_idx(const std::string& path, const std::vector<int64_t>& dims, const std::vector<uint8_t>& data, bool gzip) {
  std::vector<uint8_t> bytes = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  int64_t count = 1;
  for (int64_t d : dims) {
    count *= d;
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<uint8_t>(static_cast<uint32_t>(d) >> s));
  }
  EMBER_CHECK(count == static_cast<int64_t>(data.size()), ValueError, "write_idx(", path, "): dims hold ", count,
              " elements, data has ", data.size());
  bytes.insert(bytes.end(), data.begin(), data.end());
  if (gzip) {
    GzPtr f = open_gz(path, "wb");
    EMBER_CHECK(gzwrite(f.get(), bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()),
                IOError, path, ": write failed");
  } else {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    EMBER_CHECK(f.good(), IOError, path, ": write failed");
  }
}

ImageSet read_idx_images(const std::string& images_path, const std::string& labels_path, int64_t num_classes) {
  IdxArray im = read_idx(images_path);
  IdxArray lb = read_idx(labels_path);
  EMBER_CHECK(im.dims.size() == 3, IOError, images_path, ": expected an (n, height, width) IDX array, got ",
              im.dims.size(), " dims");
  EMBER_CHECK(lb.dims.size() == 1, IOError, labels_path, ": expected an (n) IDX label array, got ", lb.dims.size(),
              " dims");
  EMBER_CHECK(im.dims[0] == lb.dims[0], IOError, images_path, " holds ", im.dims[0], " images but ", labels_path,
              " holds ", lb.dims[0], " labels");
  ImageSet s;
  s.n = im.dims[0];
  s.channels = 1;
  s.height = im.dims[1];
  s.width = im.dims[2];
  s.pixels = std::move(im.data);
  s.labels.reserve(lb.data.size());
  for (size_t i = 0; i < lb.data.size(); ++i) {
    EMBER_CHECK(lb.data[i] < num_classes, IOError, labels_path, ": label ", int{lb.data[i]}, " at index ", i,
                " is not below the ", num_classes, " classes");
    s.labels.push_back(lb.data[i]);
  }
  for (int64_t c = 0; c < num_classes; ++c) s.class_names.push_back(std::to_string(c));
  return s;
}

namespace {
constexpr int64_t kCifarSide = 32, kCifarPixels = 3 * kCifarSide * kCifarSide, kCifarRecord = kCifarPixels + 1;
}

namespace {
ImageSet empty_cifar10() {
  ImageSet s;
  s.channels = 3;
  s.height = s.width = kCifarSide;
  s.class_names = class_names("cifar10");
  s.name = "cifar10";
  return s;
}

// Appends the records of one batch file's bytes to s.
void append_cifar10(ImageSet& s, const uint8_t* bytes, size_t size, const std::string& name) {
  EMBER_CHECK(size > 0 && size % kCifarRecord == 0, IOError, name, ": ", size,
              " bytes is not a whole number of CIFAR-10 records (1 label byte + 3072 pixel bytes each; truncated "
              "or not a CIFAR-10 batch)");
  const auto records = static_cast<int64_t>(size / kCifarRecord);
  s.pixels.reserve(s.pixels.size() + static_cast<size_t>(records * kCifarPixels));  // sized by the bytes present
  for (int64_t r = 0; r < records; ++r) {
    const uint8_t* rec = bytes + r * kCifarRecord;
    EMBER_CHECK(rec[0] < 10, IOError, name, ": record ", r, " has label ", int{rec[0]},
                " (CIFAR-10 labels are 0-9; is this a CIFAR-100 file?)");
    s.labels.push_back(rec[0]);
    s.pixels.insert(s.pixels.end(), rec + 1, rec + kCifarRecord);
  }
  s.n += records;
}
}  // namespace

ImageSet read_cifar10_batches(const std::vector<std::string>& paths) {
  ImageSet s = empty_cifar10();
  for (const std::string& path : paths) {
    const std::vector<uint8_t> bytes = read_data_file(path);
    append_cifar10(s, bytes.data(), bytes.size(), path);
  }
  return s;
}

ImageSet read_cifar10_from_memory(const void* data, size_t size, const std::string& name) {
  ImageSet s = empty_cifar10();
  append_cifar10(s, static_cast<const uint8_t*>(data), size, name);
  return s;
}

void write_cifar10_batch(const std::string& path, const ImageSet& set) {
  EMBER_CHECK(set.channels == 3 && set.height == kCifarSide && set.width == kCifarSide, ValueError,
              "write_cifar10_batch(", path, "): images must be 3x32x32");
  std::ofstream f(path, std::ios::binary);
  for (int64_t i = 0; i < set.n; ++i) {
    f.put(static_cast<char>(set.labels[static_cast<size_t>(i)]));
    f.write(reinterpret_cast<const char*>(set.pixels.data() + i * kCifarPixels), kCifarPixels);
  }
  EMBER_CHECK(f.good(), IOError, path, ": write failed");
}

std::vector<std::string> class_names(const std::string& dataset) {
  if (dataset == "fashion-mnist")
    return {"T-shirt/top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle boot"};
  if (dataset == "cifar10")
    return {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
  return {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
}

namespace {
// The first of the candidate names that exists in dir.
std::string find_file(const std::string& dir, const std::vector<std::string>& names, const std::string& what) {
  std::string tried;
  for (const std::string& n : names) {
    const fs::path p = fs::path(dir) / n;
    std::error_code ec;  // a directory we may not read: "not found", never a filesystem_error
    if (fs::exists(p, ec)) {
      require_regular_file(p.string(), what + " file");  // a FIFO or directory in its place is an error
      return p.string();
    }
    tried += (tried.empty() ? "" : ", ") + n;
  }
  throw IOError(detail::cat_str(dir, ": no ", what, " file (looked for ", tried, ")"));
}
}  // namespace

ImageSet load_dataset(const std::string& dataset, const std::string& dir, bool train) {
  ImageSet s;
  if (dataset == "fashion-mnist" || dataset == "mnist") {
    const std::string split = train ? "train" : "t10k";
    auto names = [&](const std::string& kind) {
      return std::vector<std::string>{
          split + "-" + kind + "-ubyte.gz", split + "-" + kind + "-ubyte",
          split + "-" + kind.substr(0, kind.find('-')) + "." + kind.substr(kind.find('-') + 1) + "-ubyte"};
    };
    const std::string images = find_file(dir, names("images-idx3"), split + " images");
    const std::string labels = find_file(dir, names("labels-idx1"), split + " labels");
    s = read_idx_images(images, labels);
  } else if (dataset == "cifar10") {
    std::string root = dir;
    std::error_code ec;
    if (!fs::exists(fs::path(root) / "test_batch.bin", ec) &&
        fs::is_directory(fs::path(root) / "cifar-10-batches-bin", ec))
      root = (fs::path(root) / "cifar-10-batches-bin").string();
    std::vector<std::string> paths;
    if (train) {
      for (int b = 1; b <= 5; ++b)
        paths.push_back(find_file(root, {"data_batch_" + std::to_string(b) + ".bin"}, "CIFAR-10 training batch"));
    } else {
      paths.push_back(find_file(root, {"test_batch.bin"}, "CIFAR-10 test batch"));
    }
    s = read_cifar10_batches(paths);
  } else {
    throw ValueError("load_dataset: unknown data set \"" + dataset + "\" (fashion-mnist, mnist or cifar10)");
  }
  s.class_names = class_names(dataset);
  s.name = dataset;
  return s;
}

std::string default_data_dir(const std::string& dataset) {
  if (dataset == "fashion-mnist") return "/usr/share/datasets/fashion-mnist";
  return "data/" + dataset;
}

}  // namespace ember::nn::data
