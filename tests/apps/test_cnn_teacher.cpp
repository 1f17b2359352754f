// The CNN teacher's file (apps/common/cnn_teacher.h): what apps/cnn writes,
// vit --teacher reads back (the same ResNet, frozen, in eval mode, with its
// configuration); a file of another kind or with a damaged field is a
// UsageError naming the file; NaN, overflowing or negative-variance weights
// are an IOError naming the tensor; the comma lists of --widths/--blocks.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include <ember/ember.h>
#include <ember/nn/checkpoint.h>

#include "app.h"
#include "cnn_teacher.h"

using namespace ember;
namespace fs = std::filesystem;

TEST_CASE("cnn teacher file: round trip, frozen eval model, damaged metadata refused") {
  const fs::path dir = fs::temp_directory_path() / ("ember_cnn_teacher_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "teacher.safetensors").string();
  app::TeacherConfig c;
  c.resnet.widths = {4, 8};
  c.resnet.blocks = {1, 2};
  c.data = "fashion-mnist";
  c.mean = {0.286};
  c.std = {0.353};
  c.test_accuracy = 0.9;
  c.train_seconds = 12.5;
  manual_seed(0);
  nn::ResNet model(c.resnet);
  nn::save(model, path, app::teacher_metadata(c));
  const app::Teacher t = app::load_teacher(path);
  CHECK(t.config.resnet.widths == c.resnet.widths);
  CHECK(t.config.resnet.blocks == c.resnet.blocks);
  CHECK(t.config.mean == c.mean);
  CHECK(t.config.test_accuracy == 0.9);
  CHECK(t.config.train_seconds == 12.5);
  CHECK_FALSE(t.model->is_training());
  for (const Tensor& p : t.model->parameters()) CHECK_FALSE(p.requires_grad());
  model.eval();
  const Tensor x = randn({2, 1, 28, 28});
  CHECK((*t.model)(x).to_vector<float>() == model(x).to_vector<float>());

  // Another kind of file, and metadata that does not fit the tensors.
  nn::save(model, path, {{"config", "{}"}});
  CHECK_THROWS_AS(app::load_teacher(path), app::UsageError);
  app::TeacherConfig wrong = c;
  wrong.resnet.widths = {4, 16};
  nn::save(model, path, app::teacher_metadata(wrong));
  CHECK_THROWS_WITH_AS(app::load_teacher(path), doctest::Contains("do not fit"), app::UsageError);
  auto meta = app::teacher_metadata(c);
  meta["teacher"] = R"({"in_channels": 1, "num_classes": 10, "widths": [4, 8], "blocks": [1, 2], "data": "x",
                        "mean": [0.2], "std": [0], "test_accuracy": 0.5})";
  nn::save(model, path, meta);
  CHECK_THROWS_WITH_AS(app::load_teacher(path), doctest::Contains("std"), app::UsageError);
  fs::remove_all(dir);
}

TEST_CASE("cnn teacher: --widths and --blocks lists") {
  CHECK(app::parse_int_list("16,32,64", "--widths", 1, 1024) == std::vector<int64_t>{16, 32, 64});
  CHECK(app::parse_int_list("3", "--blocks", 1, 16) == std::vector<int64_t>{3});
  for (const char* bad : {"", ",", "16,", "a,b", "0,4", "16,2000", "1,2,3,4,5,6,7,8,9", "99999999999999999999"})
    CHECK_THROWS_AS(app::parse_int_list(bad, "--widths", 1, 1024), app::UsageError);
}

TEST_CASE("cnn teacher: broken weights refused by name, the file's fingerprint follows its bytes") {
  const fs::path dir = fs::temp_directory_path() / ("ember_cnn_teacher_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "teacher.safetensors").string();
  app::TeacherConfig c;
  c.resnet.widths = {4};
  c.resnet.blocks = {1};
  c.data = "fashion-mnist";
  c.mean = {0.286};
  c.std = {0.353};
  manual_seed(0);
  nn::ResNet model(c.resnet);
  nn::save(model, path, app::teacher_metadata(c));
  CHECK_NOTHROW(app::load_teacher(path));
  const std::string before = app::file_fingerprint(path);
  CHECK(before == app::file_fingerprint(path));
  CHECK(before.find(std::to_string(fs::file_size(path)) + " bytes, fnv1a64 ") == 0);
  // The same tensors with one changed: another file, and a refused one.
  const StateDict good = model.state_dict();
  const auto with = [&](const std::string& name, double v) {
    StateDict sd;
    for (const auto& [n, t] : good) sd.emplace_back(n, n == name ? full_like(t, v) : t);
    save_safetensors(path, sd, app::teacher_metadata(c));
  };
  with("bn1.running_var", -1.0);
  CHECK(app::file_fingerprint(path) != before);
  const std::string negative = "--teacher " + path + ": tensor bn1.running_var (negative running variance)";
  CHECK_THROWS_WITH_AS(app::load_teacher(path), doctest::Contains(negative.c_str()), IOError);
  with("fc.weight", std::nan(""));
  CHECK_THROWS_WITH_AS(app::load_teacher(path), doctest::Contains("fc.weight (NaN or Inf)"), IOError);
  CHECK_THROWS_AS(app::file_fingerprint((dir / "missing").string()), IOError);
  fs::remove_all(dir);
}

TEST_CASE("app: a fingerprint of bytes in memory is the file's of the same bytes") {
  const fs::path dir = fs::temp_directory_path() / "ember_test_bytes_fingerprint";
  fs::create_directories(dir);
  const std::string bytes = std::string("any bytes: \0\xff\xfe caf\xc3\xa9", 19);
  app::write_text((dir / "f").string(), bytes);
  CHECK(app::bytes_fingerprint(bytes) == app::file_fingerprint((dir / "f").string()));
  CHECK(app::bytes_fingerprint(bytes) != app::bytes_fingerprint(bytes + "x"));
  CHECK(app::bytes_fingerprint("") == "0 bytes, fnv1a64 cbf29ce484222325");  // FNV-1a's offset basis
  fs::remove_all(dir);
}

TEST_CASE("app: outputs written together appear together, and evaluation refuses broken weights unless forced") {
  const fs::path dir = fs::temp_directory_path() / "ember_test_write_together";
  fs::remove_all(dir);
  fs::create_directories(dir);
  app::write_files_together({{(dir / "a.png").string(), "A"}, {(dir / "b.png").string(), "BB"}});
  CHECK(fs::file_size(dir / "a.png") == 1);
  CHECK(fs::file_size(dir / "b.png") == 2);
  // The second cannot be written (its directory is missing): neither appears, and the message says so.
  CHECK_THROWS_WITH_AS(
      app::write_files_together({{(dir / "c.png").string(), "C"}, {(dir / "missing" / "d.png").string(), "D"}}),
      doctest::Contains("none of c.png, d.png was written"), IOError);
  CHECK(!fs::exists(dir / "c.png"));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  CHECK(files == 2);  // a.png and b.png; no temporary left behind
  const StateDict broken = {{"w", from_vector(std::vector<float>{1, std::nanf("")}, {2})}};
  CHECK_THROWS_WITH_AS(app::check_eval_weights("t", broken, "m.safetensors", false),
                       doctest::Contains("m.safetensors: tensor w (NaN or Inf); refusing to evaluate it (--force-eval"),
                       IOError);
  CHECK_NOTHROW(app::check_eval_weights("t", broken, "m.safetensors", true));  // a warning on stderr
  fs::remove_all(dir);
}

TEST_CASE("app: a non-finite evaluation loss is an error naming the file") {
  CHECK_NOTHROW(app::check_eval_loss(0.5, "m.safetensors"));
  CHECK_THROWS_WITH_AS(app::check_eval_loss(std::nan(""), "m.safetensors"),
                       doctest::Contains("test loss of m.safetensors is NaN"), IOError);
  CHECK_THROWS_WITH_AS(app::check_eval_loss(HUGE_VAL, "m.safetensors"), doctest::Contains("is Inf"), IOError);
}
