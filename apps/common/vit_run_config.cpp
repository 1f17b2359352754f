// The ViT run configuration and training state to and from checkpoint
// metadata (run_config.h). The reading side never lets nlohmann convert a
// value by itself: its get<int>() of 1e300 is an out-of-range float-to-int
// cast (undefined behaviour), of "8" a type_error that names no file. Each
// field is read through Fields below, which checks the JSON type and the
// range the command line would have accepted, and reports the file, the
// field and what was found. JSON nested deeper than 64 is refused while it
// is parsed, and error messages describe values without dump(): both would
// otherwise recurse as deep as the file nests, and overflow the stack.
#include "vit_run_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>

#include <ember/core/error.h>

#include "json_number.h"

namespace vit {

using json = nlohmann::ordered_json;
using ember::IOError;

namespace {

// Sizes in a configuration: far beyond any ViT this demo trains, small
// enough that products of two of them and sums of those stay exact in a
// double and in int64.
constexpr int64_t kMaxSize = int64_t{1} << 31;
constexpr double kMaxDouble = std::numeric_limits<double>::max();
constexpr int kMaxDepth = 64;  // of the JSON; the app writes 3

// A value from the file, described without dump() (see above).
std::string describe(const json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();  // a scalar: no recursion
  if (v.is_number_float()) return v.dump();
  if (v.is_string()) return "a string";
  return std::string("a JSON ") + v.type_name();
}

// The fields of one JSON object from the file, read with their checks.
class Fields {
 public:
  Fields(const json& j, const std::string& file, std::string what) : j_(j), file_(file), what_(std::move(what)) {}

  int64_t integer(const char* key, int64_t lo, int64_t hi) const {
    const json& v = at(key);
    bool ok = false;
    int64_t x = 0;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      ok = u <= static_cast<uint64_t>(hi);  // hi >= 0 for every caller
      x = ok ? static_cast<int64_t>(u) : 0;
    } else if (v.is_number_integer()) {
      x = v.get<int64_t>();
      ok = true;
    }
    if (!ok || x < lo || x > hi) fail(key, "an integer from " + std::to_string(lo) + " to " + std::to_string(hi), v);
    return x;
  }
  uint64_t unsigned_integer(const char* key) const {
    const json& v = at(key);
    if (!v.is_number_unsigned()) fail(key, "a non-negative integer", v);
    return v.get<uint64_t>();
  }
  // A finite number in [lo, hi] (in (lo, hi] when above_lo).
  double number(const char* key, double lo, double hi = kMaxDouble, bool above_lo = false) const {
    const json& v = at(key);
    const double x = v.is_number() ? v.get<double>() : std::nan("");
    if (!std::isfinite(x) || x < lo || (above_lo && x == lo) || x > hi)
      fail(key,
           std::string("a number ") + (above_lo ? "above " : "from ") + fmt(lo) +
               (hi < kMaxDouble ? " to " + fmt(hi) : ""),
           v);
    return x;
  }
  // A loss: any number, NaN and the infinities as json_number stores them (a
  // run whose loss went NaN still resumes, and says so in its curves).
  double loss(const char* key) const {
    const json& v = at(key);
    const std::optional<double> x = ember::app::json_number_value(v);
    if (!x) fail(key, "a number (or \"nan\", \"inf\", \"-inf\")", v);
    return *x;
  }
  std::string choice(const char* key, std::initializer_list<const char*> options) const {
    const json& v = at(key);
    std::string list;
    for (const char* o : options) {
      if (v.is_string() && v.get_ref<const std::string&>() == o) return o;
      list += (list.empty() ? "" : ", ") + std::string(o);
    }
    fail(key, "one of " + list, v);
  }
  const json& array(const char* key) const {
    const json& v = at(key);
    if (!v.is_array()) fail(key, "an array", v);
    return v;
  }
  [[noreturn]] void error(const std::string& what) const { throw IOError(file_ + ": " + what_ + ": " + what); }

 private:
  const json& at(const char* key) const {
    const auto it = j_.find(key);
    if (it == j_.end()) error(std::string("no field \"") + key + "\"");
    return *it;
  }
  [[noreturn]] void fail(const char* key, const std::string& expected, const json& got) const {
    error(std::string("field \"") + key + "\" must be " + expected + ", not " + describe(got));
  }
  static std::string fmt(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", x);
    return b;
  }
  const json& j_;
  const std::string& file_;
  std::string what_;
};

// The metadata entry `key`, parsed; it must be a JSON object.
json parse_object(const Metadata& meta, const char* key, const std::string& file, const char* missing) {
  const auto it = meta.find(key);
  if (it == meta.end()) throw IOError(file + ": " + missing);
  // Limited depth, as in the safetensors reader (core/safetensors.cpp): an
  // ordered_json object copies its members recursively when it grows.
  const auto limit_depth = [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxDepth)
      throw IOError(file + ": metadata \"" + key + "\" is nested more than " + std::to_string(kMaxDepth) + " deep");
    return true;
  };
  json j;
  try {
    j = json::parse(it->second, limit_depth);
  } catch (const json::exception& e) {
    throw IOError(file + ": metadata \"" + key + "\" is not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw IOError(file + ": metadata \"" + key + "\" is not a JSON object but " + describe(j));
  return j;
}

}  // namespace

json to_json(const Config& c) {
  return {{"data", c.data},
          {"epochs", c.epochs},
          {"batch_size", c.batch_size},
          {"lr", c.lr},
          {"weight_decay", c.weight_decay},
          {"warmup_epochs", c.warmup_epochs},
          {"min_lr", c.min_lr},
          {"label_smoothing", c.label_smoothing},
          {"clip", c.clip},
          {"seed", c.seed},
          {"patch_size", c.patch},
          {"width", c.width},
          {"depth", c.depth},
          {"heads", c.heads},
          {"mlp", c.mlp},
          {"stem_channels", c.stem},
          {"dropout", c.dropout},
          {"crop_padding", c.crop_padding},
          {"hflip", c.hflip},
          {"erase_prob", c.erase},
          {"mixup_alpha", c.mixup},
          {"cutmix_alpha", c.cutmix},
          {"randaugment_ops", c.randaug_n},
          {"randaugment_magnitude", c.randaug_m},
          {"drop_path", c.drop_path},
          {"ema_decay", c.ema},
          {"teacher", c.teacher},
          {"distill", c.distill},
          {"distill_temperature", c.distill_temperature},
          {"distill_alpha", c.distill_alpha},
          {"precision", c.precision},
          {"limit_train", c.limit_train},
          {"limit_test", c.limit_test}};
}

json to_json(const std::vector<EpochRecord>& history) {
  json a = json::array();
  for (const auto& e : history)
    a.push_back({{"train_loss", ember::app::json_number(e.train_loss)},
                 {"test_loss", ember::app::json_number(e.test_loss)},
                 {"test_accuracy", e.test_accuracy},
                 {"train_seconds", e.train_seconds},
                 {"wall_seconds", e.wall_seconds},
                 {"lr", e.lr}});
  return a;
}

Metadata checkpoint_metadata(const Config& c, const TrainState& s) {
  const json state = {{"epoch", s.epoch},
                      {"batch", s.batch},
                      {"loss_sum", ember::app::json_number(s.loss_sum)},
                      {"step_seconds", s.step_seconds},
                      {"seen", s.seen},
                      {"data_wait_seconds", s.data_wait_seconds},
                      {"eval_seconds", s.eval_seconds},
                      {"generator_seed", s.generator_seed},
                      {"generator_offset", s.generator_offset},
                      {"world_size", s.world_size},
                      {"history", to_json(s.history)}};
  return {{"format", "ember-vit-checkpoint/1"}, {"config", to_json(c).dump()}, {"state", state.dump()}};
}

// The ranges are the command line's (apps/vit/main.cpp), with sizes capped
// at kMaxSize.
double parameter_lower_bound(const Config& c) {
  // Per block the attention projections (4 w^2) and the MLP (2 w mlp), the
  // patch embedding (w p^2 per input channel) and the stem's 3x3 kernels. In
  // double, exact up to 2^53 and never overflowing with sizes <= 2^31.
  const double w = static_cast<double>(c.width), p = static_cast<double>(c.patch);
  const double stem = static_cast<double>(c.stem);
  return static_cast<double>(c.depth) * (4 * w * w + 2 * w * static_cast<double>(c.mlp)) +
         w * p * p * std::max(1.0, stem) + 9 * stem;
}

Config read_config(const Metadata& meta, const std::string& file, int64_t stored_values, Config c) {
  const json j = parse_object(meta, "config", file, "not an ember ViT checkpoint (no \"config\" in its metadata)");
  const Fields f(j, file, "stored configuration");
  c.config_from = file;
  c.data = f.choice("data", {"fashion-mnist", "mnist", "cifar10"});
  c.epochs = static_cast<int>(f.integer("epochs", 1, std::numeric_limits<int>::max()));
  c.batch_size = f.integer("batch_size", 1, kMaxSize);
  c.lr = f.number("lr", 0, kMaxDouble, /*above_lo=*/true);
  c.weight_decay = f.number("weight_decay", 0);
  c.warmup_epochs = f.number("warmup_epochs", 0);
  c.min_lr = f.number("min_lr", 0);
  c.label_smoothing = f.number("label_smoothing", 0, 0.99);
  c.clip = f.number("clip", 0);
  c.seed = f.unsigned_integer("seed");
  c.patch = f.integer("patch_size", 1, kMaxSize);
  c.width = f.integer("width", 1, kMaxSize);
  c.depth = f.integer("depth", 1, kMaxSize);
  c.heads = f.integer("heads", 1, kMaxSize);
  c.mlp = f.integer("mlp", 1, kMaxSize);
  c.stem = f.integer("stem_channels", 0, kMaxSize);
  c.dropout = f.number("dropout", 0, 0.95);
  c.crop_padding = f.integer("crop_padding", 0, kMaxSize);
  c.hflip = f.choice("hflip", {"auto", "on", "off"});
  c.erase = f.number("erase_prob", 0, 1);
  c.mixup = f.number("mixup_alpha", 0);
  c.cutmix = f.number("cutmix_alpha", 0);
  // The DeiT recipe's fields; files written before it have none
  // and mean the defaults.
  if (j.contains("randaugment_ops")) {
    c.randaug_n = f.integer("randaugment_ops", 0, 64);
    c.randaug_m = f.integer("randaugment_magnitude", 0, 30);
    c.drop_path = f.number("drop_path", 0, 0.95);
    c.ema = f.number("ema_decay", 0, 1);
    const auto it = j.find("teacher");
    if (it == j.end() || !it->is_string()) f.error("field \"teacher\" must be a string");
    c.teacher = it->get<std::string>();
    c.distill = f.choice("distill", {"none", "hard", "soft"});
    c.distill_temperature = f.number("distill_temperature", 0, 1e3, /*above_lo=*/true);
    c.distill_alpha = f.number("distill_alpha", 0, 1);
    c.precision = f.choice("precision", {"fp32", "bf16", "fp16"});
  }
  c.limit_train = f.integer("limit_train", 0, std::numeric_limits<int64_t>::max());
  c.limit_test = f.integer("limit_test", 0, std::numeric_limits<int64_t>::max());
  if (c.width % c.heads != 0)
    f.error("width " + std::to_string(c.width) + " is not divisible by heads " + std::to_string(c.heads));
  const double need = parameter_lower_bound(c);
  if (need > static_cast<double>(stored_values)) {
    char b[64];
    std::snprintf(b, sizeof b, "%.0f", need);
    f.error(std::string("describes a model of at least ") + b + " parameters, but the file holds only " +
            std::to_string(stored_values) + " values");
  }
  return c;
}

TrainState read_train_state(const Metadata& meta, const std::string& file) {
  const json j =
      parse_object(meta, "state", file, "not an ember ViT training checkpoint (no \"state\" in its metadata)");
  const Fields f(j, file, "stored training state");
  constexpr int64_t kMaxCount = std::numeric_limits<int64_t>::max();
  TrainState s;
  s.epoch = f.integer("epoch", 0, std::numeric_limits<int>::max());
  s.batch = f.integer("batch", 0, kMaxCount);
  s.loss_sum = f.loss("loss_sum");
  s.step_seconds = f.number("step_seconds", 0);
  s.seen = f.integer("seen", 0, kMaxCount);
  s.data_wait_seconds = f.number("data_wait_seconds", 0);
  s.eval_seconds = f.number("eval_seconds", 0);
  s.generator_seed = f.unsigned_integer("generator_seed");
  s.generator_offset = f.unsigned_integer("generator_offset");
  if (j.contains("world_size"))
    s.world_size = static_cast<int>(f.integer("world_size", 1, std::numeric_limits<int>::max()));
  const json& history = f.array("history");
  // One record per completed epoch, as the app writes them.
  if (history.size() != static_cast<size_t>(s.epoch))
    f.error("\"history\" holds " + std::to_string(history.size()) + " epochs but \"epoch\" says " +
            std::to_string(s.epoch) + " were completed");
  for (size_t i = 0; i < history.size(); ++i) {
    const json& e = history[i];
    const Fields r(e, file, "stored training state: history entry " + std::to_string(i));
    if (!e.is_object()) r.error("not a JSON object but " + describe(e));
    s.history.push_back({.train_loss = r.loss("train_loss"),
                         .test_loss = r.loss("test_loss"),
                         .test_accuracy = r.number("test_accuracy", 0, 1),
                         .train_seconds = r.number("train_seconds", 0),
                         .wall_seconds = r.number("wall_seconds", 0),
                         .lr = r.number("lr", 0)});
  }
  return s;
}

std::optional<double> recorded_accuracy(const Metadata& meta, const std::string& file) {
  if (meta.count("state")) {
    const TrainState s = read_train_state(meta, file);
    if (s.history.empty()) return std::nullopt;
    return s.history.back().test_accuracy;
  }
  const auto it = meta.find("test_accuracy");
  if (it == meta.end()) return std::nullopt;
  // The whole string must be one number in [0, 1] (std::stod would accept
  // "0.5abc" and throw std::invalid_argument, uncaught, on "abc").
  const std::string& t = it->second;
  char* end = nullptr;
  const double a = t.empty() ? std::nan("") : std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !(a >= 0 && a <= 1))
    throw IOError(file + ": metadata \"test_accuracy\" must be a number from 0 to 1, not \"" + t.substr(0, 40) +
                  (t.size() > 40 ? "...\"" : "\""));
  return a;
}

}  // namespace vit
