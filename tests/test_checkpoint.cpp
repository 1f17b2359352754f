// safetensors checkpoints: round trips, a file written from PyTorch tensors
// (tests/fixtures, made by tools/make_safetensors_fixture.py), atomic
// writes, and every corrupt-file case rejected with the file named.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using test::check_close;
using test::contains;
using test::error_of;
namespace fs = std::filesystem;

namespace {
fs::path scratch(const std::string& name) { return test::scratch_path("ember_checkpoint_tests", name); }
// A file made of an 8-byte length, the given header and data bytes.
std::string write_raw(const std::string& name, const std::string& header, const std::string& data,
                      int64_t claimed_len = -1) {
  const fs::path p = scratch(name);
  std::ofstream f(p, std::ios::binary);
  const uint64_t n = claimed_len >= 0 ? static_cast<uint64_t>(claimed_len) : header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
  f << header << data;
  return p.string();
}
Tensor find(const StateDict& sd, const std::string& name) {
  for (const auto& [n, t] : sd)
    if (n == name) return t;
  FAIL("missing " << name);
  return Tensor();
}
}  // namespace

TEST_CASE("safetensors: round trip of every dtype, strided and 0-dim tensors, metadata") {
  const StateDict in = {{"a", randn({3, 4}).t()},  // non-contiguous: saved contiguous
                        {"b", tensor({1.5, -2.0}, kFloat64)},
                        {"c", arange(5)},
                        {"d", gt(randn({4}), 0.0)},
                        {"s", scalar_tensor(7.0)},
                        {"e", zeros({0, 3})}};
  const std::string path = scratch("round.safetensors").string();
  save_safetensors(path, in, {{"epoch", "3"}});
  std::map<std::string, std::string> meta;
  const StateDict out = load_safetensors(path, &meta);
  CHECK(meta["epoch"] == "3");
  REQUIRE(out.size() == in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    CHECK(out[i].first == in[i].first);
    CHECK(out[i].second.dtype() == in[i].second.dtype());
    CHECK(out[i].second.shape() == in[i].second.shape());
    CHECK(allclose(out[i].second.to(kFloat64), in[i].second.to(kFloat64), 0, 0));
  }
  // The header is padded to a multiple of 8.
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  CHECK(n % 8 == 0);
}

TEST_CASE("safetensors: a file written from PyTorch tensors loads each tensor in its dtype") {
  const StateDict sd = load_safetensors(std::string(EMBER_FIXTURE_DIR) + "/pytorch_mixed.safetensors");
  check_close(find(sd, "w32"), {-0.5, -0.25, 0.0, 0.25, 0.5, 0.75}, 0);
  CHECK(find(sd, "w64").dtype() == kFloat64);
  check_close(find(sd, "w64"), {1.0 / 3, -2.5}, 1e-16);
  CHECK(find(sd, "h16").dtype() == kFloat16);
  CHECK(find(sd, "b16").dtype() == kBFloat16);
  check_close(find(sd, "h16"), {0.5, -1.25, 65504.0, 5.960464477539063e-08}, 1e-20);
  check_close(find(sd, "b16"), {1.5, -3.0, 0.0078125, 1.0002555517425873e+30}, 1e16);
  CHECK(find(sd, "idx").to_vector<int64_t>() == std::vector<int64_t>{3, -1, int64_t(1) << 40});
}

TEST_CASE("checkpoints: a module saves and loads by name, shape errors name file and tensor") {
  nn::Sequential a({std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::BatchNorm1d>(4)});
  nn::Sequential b({std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::BatchNorm1d>(4)});
  const std::string path = scratch("model.safetensors").string();
  nn::save(a, path);
  nn::load(b, path);
  for (size_t i = 0; i < a.state_dict().size(); ++i)
    CHECK(allclose(a.state_dict()[i].second.to(kFloat64), b.state_dict()[i].second.to(kFloat64), 0, 0));
  nn::Sequential c({std::make_shared<nn::Linear>(3, 5)});
  const std::string msg = error_of<ShapeError>([&] { nn::load(c, path, false); });
  CHECK(contains(msg, path));
  CHECK(contains(msg, "0.weight"));
  const std::string strict_msg = error_of<ShapeError>([&] { nn::load(c, path); });
  CHECK(contains(strict_msg, "size mismatch for 0.bias"));
  CHECK(contains(strict_msg, "unexpected keys: \"1.weight\""));
}

TEST_CASE("checkpoints: writes are atomic and leave no temporary files") {
  const fs::path dir = scratch("atomic");
  fs::create_directories(dir);
  const std::string path = (dir / "ckpt.safetensors").string();
  save_safetensors(path, {{"x", ones({2})}});
  save_safetensors(path, {{"x", full({2}, 2.0)}});
  check_close(find(load_safetensors(path), "x"), {2, 2}, 0);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file() ? 1 : 0;
  CHECK(files == 1);
  // A target in a missing directory fails cleanly, naming the file.
  CHECK(contains(error_of<IOError>([] {
                   save_safetensors("/nonexistent/dir/x.safetensors", {{"x", ones({1})}});
                 }),
                 "/nonexistent/dir/x.safetensors"));
}

TEST_CASE("safetensors: corrupt files are rejected with the file and the problem named") {
  const std::string ok_header = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\0');
  auto err = [](const std::string& p) { return error_of<IOError>([&] { load_safetensors(p); }); };
  CHECK(contains(err(scratch("missing.safetensors").string()), "no such file"));
  {
    const fs::path p = scratch("short.safetensors");
    std::ofstream(p, std::ios::binary) << "abc";
    CHECK(contains(err(p.string()), "truncated"));
  }
  CHECK(contains(err(write_raw("liar.safetensors", ok_header, eight, 1 << 20)), "exceeds"));
  CHECK(contains(err(write_raw("json.safetensors", "{\"t\": [", "")), "invalid JSON"));
  CHECK(contains(err(write_raw("dtype.safetensors", R"({"t":{"dtype":"Q8","shape":[2],"data_offsets":[0,8]}})", eight)),
                 "unsupported dtype 'Q8'"));
  CHECK(
      contains(err(write_raw("range.safetensors", R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", eight)),
               "out of range"));
  CHECK(contains(err(write_raw("size.safetensors", R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight)),
                 "need 12"));
  CHECK(contains(
      err(write_raw(
          "overlap.safetensors",
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          eight)),
      "overlap"));
  CHECK(contains(err(write_raw("huge.safetensors",
                               R"({"t":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight)),
                 "'t'"));
  const std::string named =
      err(write_raw("named.safetensors", R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", eight));
  CHECK(contains(named, "named.safetensors"));
  CHECK(contains(named, "'t'"));
}

TEST_CASE("safetensors: a header length that does not match the file is refused, naming the file") {
  auto err = [](const std::string& p) { return error_of<IOError>([&] { load_safetensors(p); }); };
  // A header padded with spaces, as writers pad it to 8 bytes, and 1.5, -2 as float32.
  const std::string header = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})" + std::string(3, ' ');
  const float values[2] = {1.5f, -2.0f};
  const std::string data(reinterpret_cast<const char*>(values), sizeof values);
  check_close(find(load_safetensors(write_raw("exact.safetensors", header, data)), "t"), {1.5, -2.0}, 0);
  // One byte short: still valid JSON (one padding space less), and the
  // tensor would be read one byte early.
  const int64_t n = static_cast<int64_t>(header.size());
  const std::string shorter = err(write_raw("short_by_one.safetensors", header, data, n - 1));
  CHECK(contains(shorter, "short_by_one.safetensors"));
  CHECK_MESSAGE(contains(shorter, "header length " + std::to_string(n - 1) +
                                      " does not match the file: 9 bytes follow the header, but its tensors cover 8"),
                shorter);
  // One byte long: the header swallows the first data byte.
  CHECK(contains(err(write_raw("long_by_one.safetensors", header, data, n + 1)), "long_by_one.safetensors"));
  // Bytes after the last tensor, and a hole between two.
  CHECK(contains(err(write_raw("trailing.safetensors", header, data + "x")), "does not match the file"));
  const std::string holed = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  CHECK(contains(err(write_raw("hole.safetensors", holed, std::string(12, '\0'))), "tensors cover 8"));
}

TEST_CASE("safetensors: the reader over memory gives what the file reader gives") {
  const fs::path p = scratch("memory.safetensors");
  save_safetensors(p.string(), {{"a", arange(0, 6).reshape({2, 3})}, {"b", full({2}, 0.5)}}, {{"k", "v"}});
  std::ifstream f(p, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::map<std::string, std::string> meta;
  const StateDict sd = load_safetensors_from_memory(bytes.data(), bytes.size(), "in-memory", &meta);
  REQUIRE(sd.size() == 2);
  check_close(find(sd, "a"), {0, 1, 2, 3, 4, 5}, 0);
  check_close(find(sd, "b"), {0.5, 0.5}, 0);
  CHECK(meta.at("k") == "v");
  CHECK(contains(error_of<IOError>([&] { load_safetensors_from_memory(bytes.data(), 20, "cut"); }), "'cut'"));
}

TEST_CASE("safetensors: map_safetensors gives the reader's tensors without copies, and writes stay in memory") {
  // a: 64K float32 at an aligned offset (mapped); m: 3 bools, which put f's
  // float32 data 3 bytes off alignment (copied); h: bfloat16 after it.
  const Tensor a = randn({256, 256}), f = tensor({1.0, 2.0, 3.0}), h = randn({5}).to(kBFloat16);
  const Tensor m = tensor({1.0, 0.0, 1.0}).to(kBool);
  const std::string path = scratch("mapped.safetensors").string();
  save_safetensors(path, {{"a", a}, {"m", m}, {"f", f}, {"h", h}}, {{"k", "v"}});
  const StateDict read = load_safetensors(path);
  const size_t before = memory_stats(kCPU).allocated;
  std::map<std::string, std::string> meta;
  StateDict mapped = map_safetensors(path, &meta);
  const size_t held = memory_stats(kCPU).allocated - before;
  CHECK(meta.at("k") == "v");
  REQUIRE(mapped.size() == read.size());
  for (size_t i = 0; i < read.size(); ++i) {
    CHECK(mapped[i].first == read[i].first);
    CHECK(mapped[i].second.dtype() == read[i].second.dtype());
    CHECK(allclose(mapped[i].second.to(kFloat64), read[i].second.to(kFloat64), 0, 0));
  }
  // Only the small unaligned and BOOL tensors took memory of Ember's allocator; a's 256 KB are the file's pages.
  CHECK(held < 1024);
  // An in-place write changes the tensor, not the file.
  Tensor mapped_a = find(mapped, "a");
  mul_(mapped_a, 2.0);
  CHECK(allclose(mapped_a, mul(a, 2.0), 0, 0));
  CHECK(allclose(find(load_safetensors(path), "a"), a, 0, 0));
  // Replacing the file (save_safetensors renames) leaves the mapped tensors as they were.
  save_safetensors(path, {{"a", zeros({2})}});
  CHECK(allclose(mapped_a, mul(a, 2.0), 0, 0));
  CHECK(allclose(find(mapped, "f"), f, 0, 0));
  // The reader's errors.
  CHECK(contains(error_of<IOError>([&] { map_safetensors(scratch("absent.safetensors").string()); }),
                 "absent.safetensors"));
}

// Inputs that once got past the reader (docs/RELIABILITY.md): each must be an
// IOError naming the file and the tensor, not a ShapeError from deeper down or
// undefined behaviour in the stride computation.
TEST_CASE("safetensors: regression inputs from fuzzing are rejected with IOError") {
  auto err = [](const std::string& p) { return error_of<IOError>([&] { load_safetensors(p); }); };
  // A dim beyond int64 beside a zero dim: 0 elements, 0 bytes, shape [0, -1].
  const std::string neg =
      err(write_raw("dim_beyond_int64.safetensors",
                    R"({"t":{"dtype":"F32","shape":[0,18446744073709551615],"data_offsets":[0,0]}})", ""));
  CHECK(contains(neg, "dim_beyond_int64.safetensors"));
  CHECK(contains(neg, "'t'"));
  CHECK(contains(neg, "64-bit index"));
  // Dims whose product overflows int64 beside a zero dim: the contiguous
  // strides would overflow (signed overflow, undefined behaviour).
  CHECK(contains(
      err(write_raw("strides_overflow.safetensors",
                    R"({"t":{"dtype":"F32","shape":[0,4611686018427387904,4611686018427387904],"data_offsets":[0,0]}})",
                    "")),
      "64-bit index"));
  // JSON nested 1,000,000 deep beside a tensor: nlohmann's ordered_json copies
  // an object's members recursively when it grows, and overflowed the stack
  // (SIGSEGV; found writing the ViT-metadata fuzz target). Refused past 64.
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  const std::string nested = err(
      write_raw("nested.safetensors", R"({"a":)" + deep + R"(,"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                std::string(8, '\0')));
  CHECK(contains(nested, "nested.safetensors"));
  CHECK(contains(nested, "nested more than 64 deep"));
}

TEST_CASE("tensors: shapes too large to index are a ShapeError, not an overflow") {
  CHECK(contains(error_of<ShapeError>([] { empty({0, int64_t{1} << 62, int64_t{1} << 62}); }), "64-bit"));
  CHECK(contains(error_of<ShapeError>([] { empty({int64_t{1} << 61}, TensorOptions(DType::Float64)); }), "64-bit"));
  CHECK(empty({0, int64_t{1} << 40}).numel() == 0);  // fits: a valid empty tensor
}

namespace {
// A model, its AdamW and schedule after three steps: the state a training
// checkpoint holds.
struct Run {
  std::shared_ptr<nn::Linear> model = std::make_shared<nn::Linear>(3, 2);
  optim::AdamW opt{model->parameters(), optim::AdamW::defaults()};
  optim::WarmupCosineLR sched{opt, 2, 10};
  explicit Run(int steps) {
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      sum(square((*model)(ones({4, 3})))).backward();
      opt.step();
      sched.step();
    }
  }
};
StateDict without(StateDict sd, const std::string& name) {
  sd.erase(std::remove_if(sd.begin(), sd.end(), [&](const auto& e) { return e.first == name; }), sd.end());
  return sd;
}
StateDict replaced(StateDict sd, const std::string& name, const Tensor& t) {
  for (auto& [n, v] : sd)
    if (n == name) v = t;
  return sd;
}
}  // namespace

TEST_CASE("training checkpoints: model, optimizer and scheduler come back exactly, anything inexact is refused") {
  manual_seed(3);
  Run a(3);
  const std::string path = scratch("train.safetensors").string();
  nn::save_training_checkpoint(path, *a.model, a.opt, a.sched, {{"epoch", "1"}});
  std::map<std::string, std::string> meta;
  const StateDict stored = load_safetensors(path, &meta);
  CHECK(meta.at("epoch") == "1");
  Run b(0);
  nn::load_training_checkpoint(stored, path, *b.model, b.opt, b.sched);
  CHECK(allclose(b.model->weight, a.model->weight, 0, 0));
  CHECK(b.sched.get_last_lr()[0] == a.sched.get_last_lr()[0]);
  // The next step of both is the same step.
  for (Run* r : {&a, &b}) {
    r->opt.zero_grad();
    sum(square((*r->model)(ones({4, 3})))).backward();
    r->opt.step();
  }
  CHECK(allclose(b.model->weight, a.model->weight, 0, 0));

  // Damaged files that a lenient load would have trained on without a word.
  auto refused = [&](const StateDict& bad, const std::string& what) {
    Run c(0);
    std::string msg = "<no ember::Error>";
    try {
      nn::load_training_checkpoint(bad, path, *c.model, c.opt, c.sched);
    } catch (const Error& e) {
      msg = e.what();
    }
    CHECK_MESSAGE(contains(msg, what), msg);
  };
  // One of Adam's moments missing (the other present): refused by Adam.
  refused(without(stored, "optimizer.state.0.1.exp_avg_sq"), "must both be present");
  // The part's own error, with the file and the part named, its type kept.
  refused(without(stored, "optimizer.param_groups.0.lr"),
          "training checkpoint '" + path + "': optimizer state: optimizer load_state_dict: missing entry");
  Run d(0);
  CHECK_THROWS_AS(
      nn::load_training_checkpoint(without(stored, "optimizer.param_groups.0.lr"), path, *d.model, d.opt, d.sched),
      ValueError);
  refused(without(stored, "model.weight"), "training checkpoint '" + path + "': model state: load_state_dict:");
  // (Both moments of a parameter missing is what a parameter that never had
  // a gradient looks like, as in PyTorch: not an error here; vit, whose
  // every parameter trains, checks that each has its moments.)
  // A scheduler field of another dtype, or a fractional step.
  refused(replaced(stored, "scheduler.last_epoch", scalar_tensor(3.0, kFloat32)), "scheduler state");
  refused(replaced(stored, "scheduler.last_epoch", scalar_tensor(3.5, kFloat64)), "does not load back");
  // A tensor nothing reads, and one under no known prefix.
  StateDict extra = stored;
  extra.emplace_back("optimizer.state.0.7.exp_avg", zeros({2}));
  refused(extra, "nothing reads it");
  extra = stored;
  extra.emplace_back("rng.state", zeros({2}));
  refused(extra, "unexpected tensor");
}

TEST_CASE("training checkpoints: NaN, Inf and negative second moments are named") {
  StateDict sd = {{"w", tensor({1.0, std::nan("")})},
                  {"b", tensor({1.0, 2.0})},
                  {"state.0.0.exp_avg_sq", tensor({0.5, -1e-3})},
                  {"state.0.0.exp_avg", tensor({-0.5, HUGE_VAL})},
                  {"steps", from_vector(std::vector<int64_t>{-3})}};
  const std::vector<std::string> bad = nn::suspicious_tensors(sd);
  REQUIRE(bad.size() == 3);
  CHECK(bad[0] == "w (NaN or Inf)");
  CHECK(bad[1] == "state.0.0.exp_avg_sq (negative second moment)");
  CHECK(bad[2] == "state.0.0.exp_avg (NaN or Inf)");
}

TEST_CASE("training checkpoints: negative running variances and overflowing values are named") {
  StateDict sd = {{"bn.running_var", tensor({1.0f, -1.0f})},
                  {"bn.running_mean", tensor({-1.0f, 2.0f})},  // a mean may be negative
                  {"head.weight", tensor({1.0f, -3e38f})},
                  {"fc.weight", tensor({1e18, -2.0}, kFloat64)},          // large but its square fits float32
                  {"half", tensor({1.0, 2e19}, kFloat64).to(kFloat16)}};  // Inf once converted
  const std::vector<std::string> bad = nn::suspicious_tensors(sd);
  REQUIRE(bad.size() == 3);
  CHECK(bad[0] == "bn.running_var (negative running variance)");
  CHECK(bad[1] == "head.weight (values up to 3e+38, which overflow float32 when squared)");
  CHECK(bad[2] == "half (NaN or Inf)");
}

TEST_CASE("rethrow_with_context: the same exception type, the context before the message") {
  const auto with_context = [](auto error) {
    try {
      throw error;
    } catch (const Error&) {
      nn::rethrow_with_context("f.safetensors: ");
    }
  };
  CHECK_THROWS_WITH_AS(with_context(ShapeError("bad shape")), "f.safetensors: bad shape", ShapeError);
  CHECK_THROWS_WITH_AS(with_context(ValueError("missing entry 'x'")), "f.safetensors: missing entry 'x'", ValueError);
  CHECK_THROWS_WITH_AS(with_context(DTypeError("float16")), "f.safetensors: float16", DTypeError);
  CHECK_THROWS_WITH_AS(with_context(IOError("short read")), "f.safetensors: short read", IOError);
  // Anything else passes through unchanged.
  CHECK_THROWS_WITH_AS(
      [] {
        try {
          throw std::out_of_range("index");
        } catch (const std::exception&) {
          nn::rethrow_with_context("f.safetensors: ");
        }
      }(),
      "index", std::out_of_range);
}
