// The apps' shared machinery (apps/common/app.h): exit codes and the one
// line for whatever escapes an app, the output directory checked before any
// work, the finite-range validator, --flag-table.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <new>
#include <string>
#include <system_error>
#include <vector>

#include <ember/ember.h>

#include "app.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

// run_main over argv, with stderr and stdout captured; returns the exit code.
struct Result {
  int code;
  std::string out, err;
};
Result run(std::vector<std::string> args, const std::function<int()>& body, CLI::App* with = nullptr) {
  CLI::App own{"test"};
  CLI::App& cli = with ? *with : own;
  args.insert(args.begin(), "app");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::fflush(stdout);
  std::fflush(stderr);
  FILE* err = std::tmpfile();
  FILE* out = std::tmpfile();
  const int saved_err = ::dup(2), saved_out = ::dup(1);
  ::dup2(fileno(err), 2);
  ::dup2(fileno(out), 1);
  const int code = app::run_main("app", cli, static_cast<int>(argv.size()), argv.data(), body);
  std::fflush(stdout);
  std::fflush(stderr);
  ::dup2(saved_err, 2);
  ::dup2(saved_out, 1);
  ::close(saved_err);
  ::close(saved_out);
  auto slurp = [](FILE* f) {
    std::string s;
    std::rewind(f);
    for (int ch; (ch = std::fgetc(f)) != EOF;) s += static_cast<char>(ch);
    std::fclose(f);
    return s;
  };
  return {code, slurp(out), slurp(err)};
}

bool one_line(const std::string& s) { return !s.empty() && s.back() == '\n' && s.find('\n') == s.size() - 1; }

}  // namespace

TEST_CASE("apps: whatever escapes run() is one line on stderr and the documented exit code") {
  struct Case {
    std::function<int()> body;
    int code;
    const char* says;
  };
  const std::vector<Case> cases = {
      {[]() -> int { throw app::UsageError("--width 0 is not allowed"); }, 2, "app: --width 0 is not allowed"},
      {[]() -> int { throw IOError("model.safetensors: truncated\nsecond line"); }, 1, "truncated second line"},
      {[]() -> int { throw std::bad_alloc(); }, 1, "out of memory"},
      {[]() -> int {
         throw fs::filesystem_error("cannot create directories", fs::path("/x"),
                                    std::make_error_code(std::errc::not_a_directory));
       },
       1, "cannot create directories"},
      {[]() -> int { throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again)); }, 1,
       "system error"},
      {[]() -> int { return std::stoi("abc"); }, 1, "stoi"},
      {[]() -> int { throw 42; }, 1, "unknown exception"},
      {[]() -> int { return 0; }, 0, ""},
  };
  for (const Case& c : cases) {
    const Result r = run({}, c.body);
    CHECK(r.code == c.code);
    if (c.code != 0) {
      CHECK_MESSAGE(one_line(r.err), r.err);
      CHECK_MESSAGE(r.err.find(c.says) != std::string::npos, r.err);
    } else {
      CHECK(r.err.empty());
    }
  }
}

TEST_CASE("apps: bad flags end in one line and exit 2, --flag-table lists options by kind") {
  int threads = 0;
  double lr = 1;
  std::string device = "cpu", out = "out/x", weights;
  CLI::App cli{"test"};
  app::add_threads(cli, threads);
  app::add_device(cli, device);
  app::add_out(cli, out);
  app::input_file(cli.add_option("--weights", weights, "w"));
  cli.add_option("--lr", lr, "lr")->check(app::finite_range(1e-12, 1e3));
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{{"--threads", "100000"},
                                                                                   {"--threads", "-1"},
                                                                                   {"--device", "tpu"},
                                                                                   {"--device", "cuda:x"},
                                                                                   {"--lr", "nan"},
                                                                                   {"--lr", "1e309"},
                                                                                   {"--lr", "inf"},
                                                                                   {"--lr", "abc"},
                                                                                   {"--bogus"}}) {
    CLI::App fresh{"test"};
    app::add_threads(fresh, threads);
    app::add_device(fresh, device);
    fresh.add_option("--lr", lr, "lr")->check(app::finite_range(1e-12, 1e3));
    const Result r = run(
        bad, [] { return 0; }, &fresh);
    CHECK_MESSAGE(r.code == 2, bad[0]);
    CHECK_MESSAGE(one_line(r.err), r.err);
  }
  const Result t = run(
      {"--flag-table"}, [] { return 5; }, &cli);
  CHECK(t.code == 0);
  const auto table = nlohmann::json::parse(t.out);
  std::map<std::string, std::string> kinds;
  for (const auto& row : table) kinds[row.at("name")] = row.at("kind");
  CHECK(kinds.at("--threads") == "int");
  CHECK(kinds.at("--lr") == "float");
  CHECK(kinds.at("--out") == "out_dir");
  CHECK(kinds.at("--weights") == "file");
  CHECK(kinds.at("--device") == "text");
}

TEST_CASE("apps: --out is created and probed before any work, what cannot hold files is refused") {
  const fs::path dir = fs::temp_directory_path() / ("ember_app_out_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string file = (dir / "a_file").string();
  app::write_text(file, "x");
  app::prepare_out_dir((dir / "new" / "deeper").string());
  CHECK(fs::is_directory(dir / "new" / "deeper"));
  CHECK(fs::is_empty(dir / "new" / "deeper"));  // the probe is gone
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  // /proc refuses new files even to root (the tests run as root, for whom a
  // chmod 555 directory would still be writable).
  for (const std::string& bad : {file + "/below", std::string("/dev/null/below"), std::string("/proc/ember-out"),
                                 std::string("/proc"), file, (dir / "fifo").string(), std::string()}) {
    const std::string msg = [&] {
      try {
        app::prepare_out_dir(bad);
      } catch (const app::UsageError& e) {
        return std::string(e.what());
      }
      return std::string("<accepted>");
    }();
    CHECK_MESSAGE(msg.find("--out") == 0, bad, ": ", msg);
  }
  CHECK_THROWS_AS(app::check_output_file((dir / "missing" / "x.json").string(), "--json"), app::UsageError);
  CHECK_THROWS_AS(app::check_output_file(dir.string(), "--json"), app::UsageError);
  CHECK_THROWS_AS(app::check_output_file("/proc/x.json", "--json"), app::UsageError);
  app::check_output_file((dir / "x.json").string(), "--json");
  CHECK(!fs::exists(dir / "x.json"));
  app::write_json((dir / "x.json").string(), {{"a", 1}});
  CHECK(nlohmann::json::parse(std::ifstream(dir / "x.json")).at("a") == 1);
  CHECK(app::fmt("%d-%s %.2f", 3, "x", 0.5) == "3-x 0.50");
  fs::remove_all(dir);
}

TEST_CASE("apps: JSON read back from a file is refused past 64 levels or the size limit, naming the file") {
  const auto error = [](const std::string& text, size_t max_bytes = size_t{16} << 20) -> std::string {
    try {
      app::parse_stored_json(text, "m.safetensors", "metadata 'config'", 64, max_bytes);
    } catch (const IOError& e) {
      return e.what();
    }
    return "<no IOError>";
  };
  // 100,000 deep (a SIGSEGV before the limit), as an array and as objects.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK(error(deep) == "m.safetensors: metadata 'config' is JSON nested more than 64 deep");
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
  objects += "1" + std::string(100000, '}');
  CHECK(error(objects) == "m.safetensors: metadata 'config' is JSON nested more than 64 deep");
  // 64 levels are read; 65 are not.
  const nlohmann::json j64 = app::parse_stored_json(std::string(64, '[') + "7" + std::string(64, ']'), "f", "w");
  const nlohmann::json* inner = &j64;
  for (int i = 0; i < 64; ++i) inner = &(*inner)[0];
  CHECK(inner->get<int>() == 7);
  CHECK(error(std::string(65, '[') + std::string(65, ']')) ==
        "m.safetensors: metadata 'config' is JSON nested more than 64 deep");
  // Brackets inside strings (escaped quotes too) are not nesting.
  const nlohmann::json s = app::parse_stored_json("{\"k\": \"[[[\\\"[[[" + std::string(100, '{') + "\"}", "f", "w");
  CHECK(s.at("k").get<std::string>() == "[[[\"[[[" + std::string(100, '{'));
  // Size, and invalid JSON.
  CHECK(error("[1, 2, 3]", 8) == "m.safetensors: metadata 'config' is 9 bytes of JSON, over the limit of 8");
  CHECK(error("{\"a\": ").rfind("m.safetensors: metadata 'config' is not valid JSON (", 0) == 0);
  CHECK(app::parse_stored_json("{\"a\": [1, 2.5]}", "f", "w").at("a").at(1).get<double>() == 2.5);
}
