// Writes the CIFAR-10 fuzzer's seed corpus with the library's own writer
// (write_cifar10_batch): batches of one and of two records.
// Usage: seeds_cifar10 DIR
#include <cstdio>
#include <string>

#include <ember/core/error.h>
#include <ember/nn/data_readers.h>

#include "fuzz_util.h"

int main(int argc, char** argv) {
  const std::string dir = fuzz::seed_dir(argc, argv);
  ember::nn::data::ImageSet s;
  s.n = 2, s.channels = 3, s.height = 32, s.width = 32;
  for (int64_t i = 0; i < 2 * 3072; ++i) s.pixels.push_back(static_cast<uint8_t>(i * 13 % 251));
  s.labels = {3, 9};
  try {
    ember::nn::data::write_cifar10_batch(dir + "/two.bin", s);
    ember::nn::data::write_cifar10_batch(dir + "/one.bin", s.head(1));
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "seeds_cifar10: %s\n", e.what());
    return 1;
  }
  return 0;
}
