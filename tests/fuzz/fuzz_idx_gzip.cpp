// libFuzzer target: the IDX reader's gzip path, differentially. The input is
// the content of an IDX file; the target gzip-compresses it (as two gzip
// members when it is long enough, with trailing zero bytes when its length
// is odd, both of which the reader must take as gzip -d does) and checks
// that reading the compressed bytes gives exactly what reading the plain
// bytes gives: the same array, or an IOError naming the file in both cases.
#include <zlib.h>

#include <cstdint>
#include <optional>
#include <vector>

#include <ember/nn/data_readers.h>

#include "fuzz_util.h"

namespace {

// Appends data as one gzip member (level 1: fast, and any level is valid).
void append_gzip_member(const uint8_t* data, size_t size, std::vector<uint8_t>& out) {
  z_stream zs{};
  if (deflateInit2(&zs, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) fuzz::fail("deflateInit2");
  const size_t start = out.size();
  out.resize(start + deflateBound(&zs, static_cast<uLong>(size)));
  zs.next_in = const_cast<Bytef*>(data);
  zs.avail_in = static_cast<uInt>(size);
  zs.next_out = out.data() + start;
  zs.avail_out = static_cast<uInt>(out.size() - start);
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) fuzz::fail("deflate did not finish");
  out.resize(start + zs.total_out);
  deflateEnd(&zs);
}

std::optional<ember::nn::data::IdxArray> read(const uint8_t* data, size_t size, const char* name) {
  std::optional<ember::nn::data::IdxArray> a;
  fuzz::expect_success_or_io_error(name, [&] { a = ember::nn::data::read_idx_from_memory(data, size, name); });
  return a;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Content that is itself gzip would be inflated by the plain reading only.
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) return 0;
  std::vector<uint8_t> gz;
  const size_t split = size >= 16 ? size / 3 : size;
  append_gzip_member(data, split, gz);
  if (split < size) append_gzip_member(data + split, size - split, gz);
  if (size % 2) gz.insert(gz.end(), 5, 0);
  const auto plain = read(data, size, "fuzz.idx");
  const auto packed = read(gz.data(), gz.size(), "fuzz.idx.gz");
  if (plain.has_value() != packed.has_value()) fuzz::fail("plain and gzip readings disagree on validity");
  if (plain && (plain->dims != packed->dims || plain->data != packed->data))
    fuzz::fail("plain and gzip readings give different arrays");
  return 0;
}
