// The ViT app's checkpoint metadata (apps/common/vit_run_config.h): what it writes
// it reads back unchanged, and every damaged or hostile field is an IOError
// naming the file and the field. The bad cases include the ones that, before
// run_config existed, crashed `vit --resume` / `vit --eval-only --weights`:
// a zero patch size or head count (integer division by zero), 1e300 epochs
// (a float-to-int cast out of range), a missing "state" (std::out_of_range,
// uncaught), and a non-numeric "test_accuracy" (std::invalid_argument from
// std::stod, uncaught).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "../test_util.h"
#include "vit_run_config.h"

using test::contains;
using test::error_of;
using json = nlohmann::ordered_json;

namespace {

const std::string kFile = "ckpt.safetensors";
constexpr int64_t kPlenty = int64_t{1} << 40;  // stored values: no size limit

vit::Config small_config() {
  vit::Config c;
  c.width = 16, c.depth = 2, c.heads = 2, c.mlp = 32, c.epochs = 3, c.seed = 11, c.hflip = "off";
  return c;
}
vit::TrainState two_epochs() {
  vit::TrainState s;
  s.epoch = 2, s.batch = 0, s.seen = 0, s.generator_seed = 11, s.generator_offset = 987654321;
  s.history = {{2.25, 1.875, 0.4375, 3.5, 4.0, 0.003}, {1.5, 1.25, 0.71875, 3.25, 3.75, 0.0015}};
  return s;
}
// Checkpoint metadata with one field of "config" or "state" replaced.
vit::Metadata with(const std::string& part, const std::string& key, const json& value) {
  vit::Metadata m = vit::checkpoint_metadata(small_config(), two_epochs());
  json j = json::parse(m.at(part));
  j[key] = value;
  m[part] = j.dump();
  return m;
}
std::string config_error(const vit::Metadata& m, int64_t stored = kPlenty) {
  return error_of<ember::IOError>([&] { vit::read_config(m, kFile, stored, vit::Config{}); });
}
std::string state_error(const vit::Metadata& m) {
  return error_of<ember::IOError>([&] { vit::read_train_state(m, kFile); });
}

}  // namespace

TEST_CASE("vit config: checkpoint metadata round-trips the configuration and training state") {
  const vit::Metadata m = vit::checkpoint_metadata(small_config(), two_epochs());
  CHECK(m.at("format") == "ember-vit-checkpoint/1");
  vit::Config base;
  base.out = "elsewhere", base.threads = 3, base.quiet = true;
  const vit::Config c = vit::read_config(m, kFile, kPlenty, base);
  CHECK(vit::to_json(c) == vit::to_json(small_config()));
  CHECK(c.out == "elsewhere");  // the run's own paths, threads and verbosity stay
  CHECK(c.threads == 3);
  CHECK(c.quiet);
  const vit::TrainState s = vit::read_train_state(m, kFile);
  CHECK(s.epoch == 2);
  CHECK(s.generator_offset == 987654321u);
  REQUIRE(s.history.size() == 2);
  CHECK(s.history[1].test_accuracy == 0.71875);
  CHECK(vit::checkpoint_metadata(c, s) == m);
  CHECK(vit::recorded_accuracy(m, kFile) == 0.71875);
  // The number of processes of a --distributed run; files written before
  // it was stored are runs of one process.
  vit::TrainState d = two_epochs();
  d.world_size = 4;
  CHECK(vit::read_train_state(vit::checkpoint_metadata(c, d), kFile).world_size == 4);
  vit::Metadata old = m;
  json st = json::parse(old.at("state"));
  st.erase("world_size");
  old["state"] = st.dump();
  CHECK(vit::read_train_state(old, kFile).world_size == 1);
  CHECK(vit::recorded_accuracy({{"test_accuracy", "0.886400"}}, kFile) == 0.8864);
  CHECK(!vit::recorded_accuracy({}, kFile).has_value());
}

TEST_CASE("vit config: damaged fields are IOErrors naming the file and the field") {
  // Were crashes: division by zero in the app's divisibility checks.
  std::string e = config_error(with("config", "patch_size", 0));
  CHECK(contains(e, kFile));
  CHECK(contains(e, "\"patch_size\" must be an integer from 1 to 2147483648, not 0"));
  CHECK(contains(config_error(with("config", "heads", 0)), "\"heads\" must be an integer from 1"));
  // Was undefined behaviour: 1e300 converted to int.
  CHECK(contains(config_error(with("config", "epochs", 1e300)),
                 "\"epochs\" must be an integer from 1 to 2147483647, not 1e+300"));
  // Was a json type_error that named no file.
  CHECK(contains(config_error(with("config", "epochs", "8")),
                 "\"epochs\" must be an integer from 1 to 2147483647, not a string"));
  CHECK(contains(config_error(with("config", "depth", json::array({1}))), "not a JSON array"));
  CHECK(contains(config_error(with("config", "seed", -1)), "\"seed\" must be a non-negative integer, not -1"));
  CHECK(contains(config_error(with("config", "lr", 0)), "\"lr\" must be a number above 0"));
  CHECK(contains(config_error(with("config", "dropout", 0.96)), "\"dropout\" must be a number from 0 to 0.95"));
  CHECK(contains(config_error(with("config", "hflip", "sideways")), "\"hflip\" must be one of auto, on, off"));
  CHECK(
      contains(config_error(with("config", "data", "svhn")), "\"data\" must be one of fashion-mnist, mnist, cifar10"));
  CHECK(contains(config_error(with("config", "width", 17)), "width 17 is not divisible by heads 2"));
  vit::Metadata m = vit::checkpoint_metadata(small_config(), two_epochs());
  json j = json::parse(m.at("config"));
  j.erase("mlp");
  m["config"] = j.dump();
  CHECK(contains(config_error(m), "stored configuration: no field \"mlp\""));
  CHECK(contains(config_error({{"config", "{\"data\": "}}), "metadata \"config\" is not valid JSON"));
  CHECK(contains(config_error({{"config", "[1, 2]"}}), "is not a JSON object but a JSON array"));
  CHECK(contains(config_error({{"state", "{}"}}), "no \"config\" in its metadata"));
  // JSON nested a million deep: refused while parsing (ordered_json's
  // recursive copies overflowed the stack at 100,000, SIGSEGV).
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  m = vit::checkpoint_metadata(small_config(), two_epochs());
  m["config"].insert(1, "\"deep\": " + deep + ", ");
  CHECK(contains(config_error(m), "ckpt.safetensors: metadata \"config\" is nested more than 64 deep"));
  m["state"] = "{\"history\": " + deep + "}";
  CHECK(contains(state_error(m), "metadata \"state\" is nested more than 64 deep"));
}

TEST_CASE("vit config: a configuration larger than the file's tensors is refused before anything is built") {
  const vit::Metadata m = vit::checkpoint_metadata(small_config(), two_epochs());
  // Width 16, depth 2, MLP 32, patch 7: at least 2 (4 16^2 + 2 16 32) + 16 49 = 4880 parameters.
  CHECK_NOTHROW(vit::read_config(m, kFile, 4880, vit::Config{}));
  CHECK(contains(config_error(m, 4879),
                 "describes a model of at least 4880 parameters, but the file holds only 4879 values"));
  // A hostile file: a 2^31-wide, 2^31-deep model in a checkpoint of 10 values.
  vit::Config huge = small_config();
  huge.width = huge.depth = huge.heads = int64_t{1} << 31;
  CHECK(contains(config_error(vit::checkpoint_metadata(huge, two_epochs()), 10), "describes a model of at least"));
  huge.width = (int64_t{1} << 31) + 1;
  CHECK(contains(config_error(vit::checkpoint_metadata(huge, two_epochs())),
                 "\"width\" must be an integer from 1 to 2147483648"));
}

TEST_CASE("vit config: a damaged training state or recorded accuracy is an IOError naming the file") {
  // Was std::out_of_range from map::at, uncaught: the app aborted.
  vit::Metadata m = vit::checkpoint_metadata(small_config(), two_epochs());
  m.erase("state");
  std::string e = state_error(m);
  CHECK(contains(e, kFile));
  CHECK(contains(e, "no \"state\" in its metadata"));
  CHECK(contains(state_error(with("state", "epoch", 3)), "\"history\" holds 2 epochs but \"epoch\" says 3"));
  CHECK(contains(state_error(with("state", "batch", -4)), "\"batch\" must be an integer from 0"));
  CHECK(contains(state_error(with("state", "world_size", 0)), "\"world_size\" must be an integer from 1"));
  CHECK(contains(state_error(with("state", "generator_offset", 1.5)),
                 "\"generator_offset\" must be a non-negative integer, not 1.5"));
  CHECK(
      contains(state_error(with("state", "history", json::array({1, 2}))), "history entry 0: not a JSON object but 1"));
  json bad_entry = vit::to_json(two_epochs().history);
  bad_entry[1]["test_accuracy"] = 1.5;
  CHECK(contains(state_error(with("state", "history", bad_entry)),
                 "history entry 1: field \"test_accuracy\" must be a number from 0 to 1, not 1.5"));
  // Was std::invalid_argument from std::stod, uncaught: the app aborted.
  for (const char* bad : {"abc", "", "0.5abc", "nan", "2"})
    CHECK(contains(error_of<ember::IOError>([&] {
                     vit::recorded_accuracy({{"test_accuracy", bad}}, kFile);
                   }),
                   "ckpt.safetensors: metadata \"test_accuracy\" must be a number from 0 to 1"));
}

TEST_CASE("vit config: a NaN or infinite loss in the training state is stored so that it reads back") {
  vit::TrainState s = two_epochs();
  s.history[1].test_loss = std::nan("");
  s.history[1].train_loss = INFINITY;
  s.loss_sum = -INFINITY;
  const vit::Metadata m = vit::checkpoint_metadata(small_config(), s);
  CHECK(contains(m.at("state"), "\"test_loss\":\"nan\""));
  const vit::TrainState back = vit::read_train_state(m, kFile);
  CHECK(std::isnan(back.history[1].test_loss));
  CHECK(back.history[1].train_loss == INFINITY);
  CHECK(back.loss_sum == -INFINITY);
  CHECK(back.history[0].test_loss == 1.875);
  // null (what a NaN became before) and other strings are refused by name.
  json bad_entry = vit::to_json(two_epochs().history);
  bad_entry[0]["train_loss"] = nullptr;
  CHECK(contains(state_error(with("state", "history", bad_entry)),
                 "history entry 0: field \"train_loss\" must be a number (or \"nan\", \"inf\", \"-inf\"), not a JSON "
                 "null"));
  CHECK(contains(state_error(with("state", "loss_sum", "NaN")), "field \"loss_sum\" must be a number (or"));
}
