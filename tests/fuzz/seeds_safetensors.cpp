// Writes the safetensors fuzzer's seed corpus: small valid files covering
// every dtype the reader accepts (F16/BF16 by hand, as Ember writes neither),
// 0-dim and empty tensors, and metadata. Usage: seeds_safetensors DIR
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include <ember/ember.h>

#include "fuzz_util.h"

using namespace ember;

namespace {
// A file from a hand-written header and data (for dtypes Ember cannot write).
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i)));
  f << header << data;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string dir = fuzz::seed_dir(argc, argv);
  manual_seed(0);
  save_safetensors(dir + "/f32.safetensors", {{"w", randn({2, 3})}, {"b", zeros({3})}});
  save_safetensors(dir + "/mixed.safetensors",
                   {{"f64", randn({2}, TensorOptions(DType::Float64))},
                    {"i64", arange(0, 4)},
                    {"mask", tensor({1.0, 0.0, 1.0}).to(DType::Bool)},
                    {"scalar", tensor({3.5}).reshape({})},
                    {"empty", zeros({0, 4})}},
                   {{"format", "pt"}, {"step", "12"}});
  save_safetensors(dir + "/empty.safetensors", {});
  write_raw(
      dir + "/half.safetensors",
      R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}})",
      std::string("\x00\x3c\x01\x00\x80\x3f\x80\xff", 8));
  return 0;
}
