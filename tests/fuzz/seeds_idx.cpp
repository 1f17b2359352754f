// Writes the IDX fuzzers' seed corpus with the library's own writer
// (write_idx): small image and label arrays of 1 to 4 dims, plain and gzip.
// Usage: seeds_idx DIR
#include <cstdio>
#include <string>
#include <vector>

#include <ember/core/error.h>
#include <ember/nn/data_readers.h>

#include "fuzz_util.h"

int main(int argc, char** argv) {
  const std::string dir = fuzz::seed_dir(argc, argv);
  const std::vector<std::pair<std::string, std::vector<int64_t>>> arrays = {
      {"images-idx3", {3, 4, 5}}, {"labels-idx1", {6}}, {"pair-idx2", {2, 7}}, {"one-idx4", {1, 1, 2, 2}}};
  try {
    for (const auto& [name, dims] : arrays) {
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      std::vector<uint8_t> data(static_cast<size_t>(n));
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 37 % 10);
      for (bool gz : {false, true}) ember::nn::data::write_idx(dir + "/" + name + (gz ? ".gz" : ""), dims, data, gz);
    }
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "seeds_idx: %s\n", e.what());
    return 1;
  }
  return 0;
}
