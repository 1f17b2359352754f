// Nothing lost: a process killed in the middle of a checkpoint save leaves
// the previous checkpoint whole under its name (and its temporary file is
// removed by the next save of that path), and autograd graphs, used or
// not, give back every byte they allocated (also checked by LeakSanitizer in
// `make test-sanitize`).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <ember/core/file_io.h>
#include <ember/ember.h>
#include <ember/nn/data_readers.h>

#include "test_util.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  Net() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(8, 16));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 4));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(gelu((*fc1)(x))); }
};

void kill_self() { ::raise(SIGKILL); }

}  // namespace

TEST_CASE(
    "checkpoints: SIGKILL in the middle of a save keeps the previous checkpoint complete, the next save cleans up") {
  const fs::path dir = fs::temp_directory_path() / "ember_crash_safety";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "model.safetensors").string();

  manual_seed(1);
  Net saved;
  nn::save(saved, path);
  const auto saved_size = fs::file_size(path);

  Net changed;  // different weights: what the killed save was writing
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Child: killed by the hook once the header and the first tensor are in
    // the temporary file. _exit so no doctest machinery runs here.
    detail::g_safetensors_after_partial_write = kill_self;
    try {
      nn::save(changed, path);
    } catch (...) {}
    ::_exit(3);  // reached only if the hook did not fire
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);

  // The final name still holds the previous file, complete, and it loads.
  CHECK(fs::file_size(path) == saved_size);
  Net loaded;
  nn::load(loaded, path);
  const StateDict a = saved.state_dict(), b = loaded.state_dict();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].first == b[i].first);
    CHECK(allclose(a[i].second, b[i].second, 0, 0));
  }
  // The partial data sits only in the temporary file, which is shorter and
  // named for the target and the killed process.
  const std::string stale_prefix = "model.safetensors.tmp." + std::to_string(pid) + ".";
  int partial = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path() == fs::path(path)) continue;
    CHECK(e.path().filename().string().rfind(stale_prefix, 0) == 0);
    CHECK(e.path().filename().string().size() == stale_prefix.size() + 6);
    CHECK(e.file_size() < saved_size);
    ++partial;
  }
  CHECK(partial == 1);

  // The next successful save of the same path removes it, and nothing else:
  // not the file of a save in progress by a living process (this one), not
  // files merely starting with the name, not another path's temporaries.
  auto touch = [&](const std::string& name) { std::ofstream((dir / name).string()) << "x"; };
  const std::vector<std::string> kept = {"model.safetensors.tmp." + std::to_string(::getpid()) + ".a1B2c3",
                                         "model.safetensors.tmp.notes",
                                         "model.safetensors.tmp." + std::to_string(pid) + ".toolong",
                                         "other.safetensors.tmp." + std::to_string(pid) + ".a1B2c3"};
  for (const std::string& name : kept) touch(name);
  nn::save(changed, path);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  std::vector<std::string> expected = kept;
  expected.push_back("model.safetensors");
  std::sort(expected.begin(), expected.end());
  CHECK(left == expected);
  nn::load(loaded, path);
  CHECK(allclose(loaded.fc1->weight, changed.fc1->weight, 0, 0));
  fs::remove_all(dir);
}

TEST_CASE("files: a FIFO, a directory or a device named as a model or data file is refused at once, never opened") {
  const fs::path dir = fs::temp_directory_path() / ("ember_fifo_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string fifo = (dir / "model.safetensors").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Opening the FIFO would block this test forever (no writer ever comes):
  // the readers stat first. A hang here is the bug.
  CHECK_THROWS_WITH_AS(load_safetensors(fifo), doctest::Contains("FIFO"), IOError);
  CHECK_THROWS_WITH_AS(nn::data::read_idx(fifo), doctest::Contains("FIFO"), IOError);
  CHECK_THROWS_WITH_AS(nn::data::read_cifar10_batches({fifo}), doctest::Contains("FIFO"), IOError);
  CHECK_THROWS_WITH_AS(load_safetensors(dir.string()), doctest::Contains("directory"), IOError);
  CHECK_THROWS_WITH_AS(load_safetensors("/dev/null"), doctest::Contains("character device"), IOError);
  CHECK_THROWS_WITH_AS(load_safetensors((dir / "missing").string()), doctest::Contains("no such file"), IOError);
  CHECK_THROWS_WITH_AS(load_safetensors((dir / "model.safetensors" / "below").string()),
                       doctest::Contains("not a directory"), IOError);
  // A data directory whose expected file is a FIFO: named, not waited on.
  const fs::path data = dir / "data";
  fs::create_directories(data);
  REQUIRE(::mkfifo((data / "train-images-idx3-ubyte").c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(nn::data::load_dataset("mnist", data.string(), true), doctest::Contains("FIFO"), IOError);
  fs::remove_all(dir);
}

TEST_CASE("files: read_file returns every byte of a regular file and names the file in its errors") {
  const fs::path dir = fs::temp_directory_path() / ("ember_read_file_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string bytes;
  for (int i = 0; i < 3 * 256; ++i) bytes.push_back(static_cast<char>(i % 256));  // NUL, CR, 0xFF included
  const std::string path = (dir / "bytes.bin").string();
  std::ofstream(path, std::ios::binary) << bytes;
  CHECK(read_file(path, "GPT-2 merges") == bytes);
  const std::string empty = (dir / "empty.txt").string();
  std::ofstream(empty, std::ios::binary).flush();
  CHECK(read_file(empty).empty());
  const std::string missing = (dir / "missing.json").string();
  const std::string named = "GPT-2 vocabulary '" + missing + "': no such file";
  CHECK_THROWS_WITH_AS(read_file(missing, "GPT-2 vocabulary"), doctest::Contains(named.c_str()), IOError);
  CHECK_THROWS_WITH_AS(read_file(dir.string(), "GPT-2 config"), doctest::Contains("is a directory"), IOError);
  const std::string fifo = (dir / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(read_file(fifo), doctest::Contains("FIFO"), IOError);  // refused, never opened
  fs::remove_all(dir);
}

TEST_CASE("files: SIGKILL in the middle of an atomic write (metrics.json) keeps the previous file whole") {
  const fs::path dir = fs::temp_directory_path() / ("ember_atomic_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "metrics.json").string();
  const std::string before = "{\"epochs_run\": 1}\n";
  write_file_atomic(path, before);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    try {
      write_file_atomic(path, [](const ByteWriter& write) {
        write("{\"epochs_run\": 2, \"per_e", 24);  // half a file, then killed
        ::raise(SIGKILL);
      });
    } catch (...) {}
    ::_exit(3);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  std::ifstream in(path);
  const std::string now((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(now == before);
  // The next write replaces it and removes the dead process's temporary.
  write_file_atomic(path, std::string("{}\n"));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  CHECK(files == 1);
  // A write that fails (its fill throws, or its directory is gone) leaves the
  // previous file and no temporary.
  CHECK_THROWS_AS(write_file_atomic(path, [](const ByteWriter&) { throw IOError("stop"); }), IOError);
  CHECK_THROWS_WITH_AS(write_file_atomic((dir / "metrics.json" / "below").string(), std::string("x")),
                       doctest::Contains("cannot write"), IOError);
  files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  CHECK(files == 1);
  fs::remove_all(dir);
}

TEST_CASE("threads: set_num_threads refuses more than kMaxThreads with an Ember error, keeping the pool") {
  const int before = num_threads();
  CHECK_THROWS_WITH_AS(set_num_threads(kMaxThreads + 1), doctest::Contains("at most"), ValueError);
  CHECK_THROWS_AS(set_num_threads(0), ValueError);
  CHECK(num_threads() == before);
}

TEST_CASE("autograd: graphs built and dropped, with or without backward, free all their memory") {
  empty_cache();
  const size_t base = memory_stats().allocated;
  manual_seed(0);
  {
    Net net;
    const size_t with_params = memory_stats().allocated;
    for (int i = 0; i < 200; ++i) {
      Tensor x = randn({4, 8});
      Tensor loss = mean(square(net.forward(x)));
      if (i % 3 == 0)
        loss.backward();  // graph freed by backward
      else if (i % 3 == 1)
        loss.backward({}, /*retain_graph=*/true);  // kept until loss dies
      // i % 3 == 2: backward never runs; the graph dies with loss
    }
    // The parameters' gradients are the only thing left beside them.
    net.zero_grad();
    CHECK(memory_stats().allocated == with_params);
  }
  CHECK(memory_stats().allocated == base);
  // A graph whose only reference is the loss's grad_fn, dropped mid-way
  // through a chain (Node destructors chain through shared_ptr edges).
  {
    Tensor w = randn({64}).requires_grad_();
    Tensor y = w;
    for (int i = 0; i < 2000; ++i) y = y * 1.0001;
    std::weak_ptr<autograd::Node> first = y.grad_fn();
    y = Tensor();
    CHECK(first.expired());
  }
  CHECK(memory_stats().allocated == base);
}
