// safetensors I/O with nlohmann::json for the header; map_safetensors's
// tensors are views of per-tensor private mappings of the file.
#include <ember/core/safetensors.h>

#include <ember/core/file_io.h>
#include <ember/core/mapped_file.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

namespace ember {

namespace detail {
void (*g_safetensors_after_partial_write)() = nullptr;
}  // namespace detail

namespace {

const char* st_dtype(DType t) {
  switch (t) {
    case DType::Float32:
      return "F32";
    case DType::Float64:
      return "F64";
    case DType::Int64:
      return "I64";
    case DType::Bool:
      return "BOOL";
    case DType::BFloat16:
      return "BF16";
    case DType::Float16:
      return "F16";
  }
  return "?";
}

constexpr int kMaxJsonDepth = 64;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw IOError("safetensors file '" + path + "': " + what);
}

}  // namespace

void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    EMBER_CHECK(t.defined(), ValueError, "save_safetensors: tensor '", name, "' is undefined");
    EMBER_CHECK(name != "__metadata__", ValueError, "save_safetensors: '__metadata__' is reserved");
    EMBER_CHECK(!header.contains(name), ValueError, "save_safetensors: duplicate tensor name '", name, "'");
    Tensor c = t.detach().cpu().contiguous();
    const uint64_t n = static_cast<uint64_t>(c.numel()) * c.element_size();
    header[name] = {{"dtype", st_dtype(c.dtype())}, {"shape", c.shape().vec()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    data.push_back(c);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  const uint64_t hlen = h.size();

  // Atomic replace (core/file_io.h): a crash mid-write leaves the previous file.
  write_file_atomic(path, [&](const ByteWriter& write) {
    unsigned char len_le[8];
    for (int i = 0; i < 8; ++i) len_le[i] = static_cast<unsigned char>(hlen >> (8 * i));
    write(len_le, 8);
    write(h.data(), h.size());
    for (size_t i = 0; i < data.size(); ++i) {
      write(data[i].data_ptr(), static_cast<size_t>(data[i].numel()) * data[i].element_size());
      if (i == 0 && detail::g_safetensors_after_partial_write) detail::g_safetensors_after_partial_write();
    }
  });
}

namespace {

// Where the reader's bytes come from: a file read piece by piece (a
// checkpoint may be larger than we want to hold twice) or a memory block.
class Source {
 public:
  virtual ~Source() = default;
  virtual uint64_t size() const = 0;
  // Reads n bytes at offset into dst; false if they are not all there.
  virtual bool read(uint64_t offset, size_t n, char* dst) = 0;
};

class FileSource final : public Source {
 public:
  // A FIFO, directory or device is refused before it is opened (opening a FIFO blocks).
  explicit FileSource(const std::string& path)
      : in_((require_regular_file(path, "safetensors file"), path), std::ios::binary | std::ios::ate) {
    if (!in_) fail(path, std::string("cannot open for reading: ") + std::strerror(errno));  // "Permission denied"
    size_ = static_cast<uint64_t>(in_.tellg());
  }
  uint64_t size() const override { return size_; }
  bool read(uint64_t offset, size_t n, char* dst) override {
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(dst, static_cast<std::streamsize>(n));
    return static_cast<bool>(in_);
  }

 private:
  std::ifstream in_;
  uint64_t size_ = 0;
};

class MemorySource final : public Source {
 public:
  MemorySource(const void* data, size_t size) : data_(static_cast<const char*>(data)), size_(size) {}
  uint64_t size() const override { return size_; }
  bool read(uint64_t offset, size_t n, char* dst) override {
    if (offset > size_ || n > size_ - offset) return false;
    if (n) std::memcpy(dst, data_ + offset, n);
    return true;
  }

 private:
  const char* data_;
  size_t size_;
};

// With a mapped file: map every tensor whose data is aligned to its
// elements in the file instead of reading it.
StateDict load_from(Source& src, const std::string& path, std::map<std::string, std::string>* metadata,
                    const MappedFile* mapped = nullptr) {
  const uint64_t size = src.size();
  if (size < 8) fail(path, "truncated: " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  unsigned char len_le[8];
  if (!src.read(0, 8, reinterpret_cast<char*>(len_le))) fail(path, "cannot read the header length");
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= static_cast<uint64_t>(len_le[i]) << (8 * i);
  if (hlen > size - 8)
    fail(path, "header length " + std::to_string(hlen) + " exceeds the file's remaining " + std::to_string(size - 8) +
                   " bytes");
  if (hlen > 100u * 1024 * 1024) fail(path, "header length " + std::to_string(hlen) + " is over the 100 MB limit");
  std::string h(static_cast<size_t>(hlen), '\0');
  if (!src.read(8, h.size(), h.data())) fail(path, "cannot read the " + std::to_string(hlen) + "-byte header");
  const uint64_t data_size = size - 8 - hlen;

  nlohmann::ordered_json header;  // keeps the file's order of tensors
  // ordered_json keeps an object's members in a vector of pairs whose key is
  // const, so when that vector grows the members are copied, recursively: a
  // value nested a million deep overflowed the stack (SIGSEGV). A header is
  // 3 deep; deeper than kMaxJsonDepth is refused while parsing.
  const auto limit_depth = [&](int depth, nlohmann::ordered_json::parse_event_t, nlohmann::ordered_json&) {
    if (depth > kMaxJsonDepth) fail(path, "the header is nested more than " + std::to_string(kMaxJsonDepth) + " deep");
    return true;
  };
  try {
    header = nlohmann::ordered_json::parse(h, limit_depth);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("invalid JSON header: ") + e.what());
  }
  if (!header.is_object()) fail(path, "the header is not a JSON object");

  struct Entry {
    std::string name;
    std::string dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(path, "__metadata__ is not an object");
      if (metadata)
        for (auto m = it->begin(); m != it->end(); ++m) {
          if (!m->is_string()) fail(path, "__metadata__ value '" + m.key() + "' is not a string");
          (*metadata)[m.key()] = m->get<std::string>();
        }
      continue;
    }
    const std::string& name = it.key();
    const nlohmann::ordered_json& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets") ||
        !e["dtype"].is_string() || !e["shape"].is_array() || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2)
      fail(path, "tensor '" + name + "': expected {\"dtype\": str, \"shape\": [ints], \"data_offsets\": [begin, end]}");
    Entry en{name, e["dtype"].get<std::string>(), Shape(), 0, 0};
    if (e["shape"].size() > static_cast<size_t>(kMaxDims)) fail(path, "tensor '" + name + "': too many dims");
    uint64_t numel = 1;
    uint64_t extent = 1;  // the product with zeros as ones bounds every stride
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned()) fail(path, "tensor '" + name + "': shape entries must be non-negative integers");
      const uint64_t v = d.get<uint64_t>();
      // Reject a dim beyond int64, or dims whose product is, even beside a
      // zero dim (numel 0, so the byte count matched and these got through:
      // found under the fuzz build, tests/test_checkpoint.cpp).
      const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      const uint64_t m = std::max<uint64_t>(v, 1);
      if (m > limit / extent)
        fail(path, "tensor '" + name + "': shape " + e["shape"].dump() +
                       " has more elements than a 64-bit index can address");
      extent *= m;
      numel *= v;  // numel <= extent: no overflow
      en.shape.push_back(static_cast<int64_t>(v));
    }
    for (int k = 0; k < 2; ++k)
      if (!e["data_offsets"][k].is_number_unsigned())
        fail(path, "tensor '" + name + "': data_offsets must be non-negative integers");
    en.begin = e["data_offsets"][0].get<uint64_t>();
    en.end = e["data_offsets"][1].get<uint64_t>();
    size_t es;
    if (en.dtype == "F32")
      es = 4;
    else if (en.dtype == "F64" || en.dtype == "I64")
      es = 8;
    else if (en.dtype == "F16" || en.dtype == "BF16")
      es = 2;
    else if (en.dtype == "BOOL")
      es = 1;
    else
      fail(path, "tensor '" + name + "': unsupported dtype '" + en.dtype + "' (F32, F64, F16, BF16, I64, BOOL)");
    if (en.begin > en.end || en.end > data_size)
      fail(path, "tensor '" + name + "': data_offsets [" + std::to_string(en.begin) + ", " + std::to_string(en.end) +
                     "] are out of range for " + std::to_string(data_size) + " bytes of data");
    if (numel > std::numeric_limits<uint64_t>::max() / es || en.end - en.begin != numel * es)
      fail(path, "tensor '" + name + "': data_offsets span " + std::to_string(en.end - en.begin) + " bytes but dtype " +
                     en.dtype + " and shape " + en.shape.str() + " need " + std::to_string(numel * es));
    entries.push_back(std::move(en));
  }
  // Offsets must not overlap.
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end && by_offset[i]->begin != by_offset[i]->end)
      fail(path, "tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name + "' overlap");
  // Without overlaps, the tensors cover the data exactly when their sizes add
  // up to it: the format allows no holes and nothing after the last tensor
  // (as the safetensors library checks). A header length a few bytes short
  // otherwise still parses (the header's padding spaces cut off) and every
  // tensor would be read from a shifted offset.
  uint64_t covered = 0;
  for (const Entry& e : entries) covered += e.end - e.begin;
  if (covered != data_size)
    fail(path, "header length " + std::to_string(hlen) + " does not match the file: " + std::to_string(data_size) +
                   " bytes follow the header, but its tensors cover " + std::to_string(covered));

  StateDict out;
  std::vector<char> raw;
  for (const Entry& e : entries) {
    const DType dt = e.dtype == "F32"    ? DType::Float32
                     : e.dtype == "F64"  ? DType::Float64
                     : e.dtype == "I64"  ? DType::Int64
                     : e.dtype == "BF16" ? DType::BFloat16
                     : e.dtype == "F16"  ? DType::Float16
                                         : DType::Bool;
    // Mapped where the data is aligned to its elements (the format does not
    // promise it: a float32 tensor after an odd-sized BOOL or 16-bit one may
    // start anywhere; those are read). BOOL is read, to check its bytes.
    const uint64_t at = 8 + hlen + e.begin;
    if (mapped && dt != DType::Bool && e.end > e.begin && at % itemsize(dt) == 0) {
      Tensor t = mapped->try_map(at, e.shape, dt);
      if (t.defined()) {
        out.emplace_back(e.name, t);
        continue;
      }
    }
    raw.resize(static_cast<size_t>(e.end - e.begin));
    if (!src.read(at, raw.size(), raw.data())) fail(path, "tensor '" + e.name + "': read failed (truncated file?)");
    Tensor t;
    {
      t = empty(e.shape, TensorOptions(dt));
      if (!raw.empty()) std::memcpy(t.data_ptr(), raw.data(), raw.size());
      if (dt == DType::Bool) {
        const unsigned char* b = reinterpret_cast<const unsigned char*>(raw.data());
        for (size_t i = 0; i < raw.size(); ++i)
          if (b[i] > 1) fail(path, "tensor '" + e.name + "': BOOL byte " + std::to_string(b[i]) + " is not 0 or 1");
      }
    }
    out.emplace_back(e.name, t);
  }
  return out;
}

}  // namespace

StateDict load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  FileSource src(path);
  return load_from(src, path, metadata);
}

StateDict map_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  FileSource src(path);  // checks the path and reads the header through the stream
  const MappedFile mapped(path, "safetensors file");
  return load_from(src, path, metadata, &mapped);
}

StateDict load_safetensors_from_memory(const void* data, size_t size, const std::string& name,
                                       std::map<std::string, std::string>* metadata) {
  MemorySource src(data, size);
  return load_from(src, name, metadata);
}

}  // namespace ember
