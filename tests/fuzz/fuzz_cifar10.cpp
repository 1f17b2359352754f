// libFuzzer target: the CIFAR-10 binary batch reader (nn/data_readers.h).
// A bad file must be an IOError naming it; an accepted one must hold one
// 3x32x32 image and one label below 10 per record.
#include <cstdint>

#include <ember/nn/data_readers.h>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_success_or_io_error("fuzz.bin", [&] {
    const ember::nn::data::ImageSet s = ember::nn::data::read_cifar10_from_memory(data, size, "fuzz.bin");
    if (s.n * 3073 != static_cast<int64_t>(size) || s.image_size() != 3072 ||
        s.pixels.size() != static_cast<size_t>(s.n * 3072) || s.labels.size() != static_cast<size_t>(s.n))
      fuzz::fail("CIFAR-10 set whose sizes do not match the file");
    for (int64_t l : s.labels)
      if (l < 0 || l >= 10) fuzz::fail("CIFAR-10 label out of range accepted");
    fuzz::touch(s.pixels.data(), s.pixels.size());
  });
  return 0;
}
