// Writes the vit_config fuzzer's seed corpus: the metadata lines the ViT app
// writes (apps/common/vit_run_config.h), for a training checkpoint after two
// epochs, one interrupted mid-epoch, and a model.safetensors (config and
// test_accuracy only). Usage: seeds_vit_config DIR
#include <cstdio>
#include <fstream>
#include <string>

#include "fuzz_util.h"
#include "vit_run_config.h"

namespace {
void write(const std::string& path, const vit::Metadata& meta) {
  std::ofstream f(path, std::ios::binary);
  f << meta.at("config");
  if (meta.count("state")) f << "\n" << meta.at("state");
  if (meta.count("test_accuracy")) f << "\n" << meta.at("test_accuracy");
}
}  // namespace

int main(int argc, char** argv) {
  const std::string dir = fuzz::seed_dir(argc, argv);
  vit::Config c;
  c.width = 16, c.depth = 2, c.heads = 2, c.mlp = 32, c.epochs = 3;
  vit::TrainState s;
  s.epoch = 2, s.generator_seed = 7, s.generator_offset = 123456;
  s.history = {{2.1, 1.9, 0.42, 3.5, 4.0, 0.003}, {1.2, 1.1, 0.71, 3.4, 3.9, 0.0015}};
  write(dir + "/checkpoint", vit::checkpoint_metadata(c, s));
  vit::Config hybrid = c;
  hybrid.data = "cifar10", hybrid.stem = 8, hybrid.patch = 4, hybrid.hflip = "off", hybrid.mixup = 0.2;
  vit::TrainState mid = s;
  mid.batch = 5, mid.seen = 160, mid.loss_sum = 301.5, mid.step_seconds = 1.25;
  write(dir + "/interrupted", vit::checkpoint_metadata(hybrid, mid));
  write(dir + "/model", {{"config", vit::to_json(c).dump()}, {"test_accuracy", "0.886400"}});
  return 0;
}
