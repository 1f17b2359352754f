// libFuzzer target: what the ViT app reads back from a checkpoint's metadata
// (apps/common/vit_run_config.h) before --resume or --eval-only builds anything.
// The input is up to three lines: the "config", "state" and "test_accuracy"
// metadata strings (a line that is absent is a key that is absent). Each
// reader must return or throw an IOError naming the file; and what it
// accepts must survive the app's own round trip (written by
// checkpoint_metadata, read back equal).
#include <algorithm>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "vit_run_config.h"

namespace {
constexpr const char* kFile = "fuzz.safetensors";
// The values a small checkpoint holds: enough for the seeds' models, far
// too few for a configuration claiming a huge one.
constexpr int64_t kStoredValues = int64_t{1} << 20;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  vit::Metadata meta;
  const char* keys[] = {"config", "state", "test_accuracy"};
  size_t begin = 0;
  for (const char* key : keys) {
    if (begin > text.size()) break;
    const size_t end = std::min(text.find('\n', begin), text.size());
    meta[key] = text.substr(begin, end - begin);
    begin = end + 1;
  }
  fuzz::expect_success_or_io_error(kFile, [&] {
    const vit::Config c = vit::read_config(meta, kFile, kStoredValues, vit::Config{});
    vit::TrainState s;
    fuzz::expect_success_or_io_error(kFile, [&] { s = vit::read_train_state(meta, kFile); });
    const vit::Metadata again = vit::checkpoint_metadata(c, s);
    const vit::Config c2 = vit::read_config(again, "round trip", kStoredValues, vit::Config{});
    const vit::TrainState s2 = vit::read_train_state(again, "round trip");
    if (vit::to_json(c) != vit::to_json(c2) || vit::checkpoint_metadata(c2, s2) != again)
      fuzz::fail("the configuration or state changed in a round trip through checkpoint metadata");
  });
  fuzz::expect_success_or_io_error(kFile, [&] { vit::recorded_accuracy(meta, kFile); });
  return 0;
}
