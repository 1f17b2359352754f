// libFuzzer target: the IDX reader (nn/data_readers.h) over arbitrary bytes,
// plain or gzip (the seeds hold both; a mutated gzip seed mostly exercises
// zlib's error paths, fuzz_idx_gzip the IDX header behind valid streams).
// A bad file must be an IOError naming it; an accepted one must hold
// exactly as many bytes as its dims multiply to.
#include <cstdint>

#include <ember/nn/data_readers.h>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_success_or_io_error("fuzz.idx", [&] {
    const ember::nn::data::IdxArray a = ember::nn::data::read_idx_from_memory(data, size, "fuzz.idx");
    uint64_t n = 1;
    for (int64_t d : a.dims) n *= static_cast<uint64_t>(d);
    if (a.dims.empty() || n != a.data.size()) fuzz::fail("IDX array whose data does not match its dims");
    fuzz::touch(a.data.data(), a.data.size());
  });
  return 0;
}
