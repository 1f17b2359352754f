// Writes a tiny Fashion-MNIST-format data set for the ViT smoke test
// (cmake/smoke_vit.cmake): gzip IDX files of 28x28 images, 320 for training
// and 160 for testing, so the test needs no download. Class k is a bright
// horizontal band at rows 2k+4..2k+5 over noise: learnable in a few steps.
// Usage: make_vit_smoke_data DIR [TEST_SIDE]; TEST_SIDE (default 28) gives
// the test images another size, for the apps' refusal of a mixed-up data set.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/nn/data_readers.h>

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: make_vit_smoke_data DIR [TEST_SIDE]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t test_side = argc == 3 ? std::atoll(argv[2]) : 28;
  if (test_side < 1 || test_side > 256) {
    std::fprintf(stderr, "make_vit_smoke_data: TEST_SIDE must be from 1 to 256\n");
    return 2;
  }
  std::filesystem::create_directories(dir);
  uint32_t state = 2024;
  auto noise = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<uint8_t>(state >> 26);  // 0..63
  };
  try {
    for (auto [split, n] : {std::pair<const char*, int64_t>{"train", 320}, {"t10k", 160}}) {
      std::vector<uint8_t> px, lb;
      const int64_t side = std::string(split) == "t10k" ? test_side : 28;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = (i * 7 + i / 10) % 10;
        lb.push_back(static_cast<uint8_t>(k));
        for (int64_t y = 0; y < side; ++y)
          for (int64_t x = 0; x < side; ++x)
            px.push_back(y / 2 == k + 2 ? static_cast<uint8_t>(200 + noise() / 2) : noise());
      }
      ember::nn::data::write_idx(dir + "/" + split + "-images-idx3-ubyte.gz", {n, side, side}, px, true);
      ember::nn::data::write_idx(dir + "/" + split + "-labels-idx1-ubyte.gz", {n}, lb, true);
    }
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "make_vit_smoke_data: %s\n", e.what());
    return 1;
  }
  return 0;
}
