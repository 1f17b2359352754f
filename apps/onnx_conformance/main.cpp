// onnx_conformance: ONNX's backend test data run through Ember's importer.
//
// Every case of the suites node/, pytorch-converted/, pytorch-operator/ and
// simple/ under --data (Debian's libonnx-testdata) is loaded and run on each
// of its data sets, and classified passed, failed (the largest absolute
// error, or the exception) or unsupported (the op or attribute Ember lacks).
// It prints a table per op (a node case's op is its one node's type; a
// multi-node node case is counted with the one-node case it expands, where
// there is one; the other suites are one group each) and totals per suite.
//
// --json FILE writes the totals and every case; --write-pass-list FILE the
// sorted "suite/case" lines of the cases that passed; --expect-pass-list
// FILE exits 1 naming every listed case that no longer passes (CTest
// onnx_conformance_pass_list). Exit 0 otherwise: a failing case is a
// result, not an error of the runner.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <ember/core/file_io.h>

#include "app.h"
#include "cases.h"

namespace fs = std::filesystem;
using conformance::CaseResult;
using conformance::Status;

namespace {

struct Options {
  std::string data = "/usr/share/libonnx-testdata/data";
  std::string json, filter, write_pass_list, expect_pass_list;
  bool verbose = false;
};

const char* const kSuites[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};

struct Tally {
  int passed = 0, failed = 0, unsupported = 0;
  int total() const { return passed + failed + unsupported; }
  void add(Status s) { (s == Status::Passed ? passed : s == Status::Failed ? failed : unsupported)++; }
};

// A multi-node node case under the one-node case it expands ("test_softmax_axis_0_expanded" under
// Softmax), else under "(graphs)".
void name_groups(std::vector<CaseResult>& results) {
  std::map<std::string, std::string> single;
  for (const auto& r : results)
    if (r.suite == "node" && !r.group.empty()) single[r.name] = r.group;
  for (auto& r : results) {
    if (r.suite != "node" || !r.group.empty()) continue;
    std::string base = r.name;
    const std::string suffix = "_expanded";
    if (base.size() > suffix.size() && base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0)
      base.resize(base.size() - suffix.size());
    auto it = single.find(base);
    r.group = it != single.end() ? it->second : "(graphs)";
  }
}

std::set<std::string> read_list(const std::string& path) {
  ember::require_regular_file(path, "pass list");
  std::ifstream f(path);
  std::set<std::string> out;
  for (std::string line; std::getline(f, line);)
    if (!line.empty() && line[0] != '#') out.insert(line);
  return out;
}

int run(const Options& o) {
  if (!fs::is_directory(o.data)) throw ember::app::UsageError("--data '" + o.data + "' is not a directory");
  if (!o.json.empty()) ember::app::check_output_file(o.json, "--json");
  if (!o.write_pass_list.empty()) ember::app::check_output_file(o.write_pass_list, "--write-pass-list");
  std::set<std::string> expected;
  if (!o.expect_pass_list.empty()) expected = read_list(o.expect_pass_list);

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<CaseResult> results;
  for (const char* suite : kSuites) {
    const fs::path dir = fs::path(o.data) / suite;
    if (!fs::is_directory(dir)) {
      std::fprintf(stderr, "onnx_conformance: warning: no suite %s under %s\n", suite, o.data.c_str());
      continue;
    }
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory()) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      if (!o.filter.empty() && (std::string(suite) + "/" + name).find(o.filter) == std::string::npos) continue;
      results.push_back(conformance::run_case((dir / name).string(), suite, name));
      if (o.verbose && results.back().status != Status::Passed)
        std::printf("%-11s %s/%s: %s\n", conformance::status_name(results.back().status), suite, name.c_str(),
                    results.back().detail.c_str());
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  name_groups(results);

  // ---- the table per op, then per suite -------------------------------------
  std::map<std::string, Tally> by_group;
  std::map<std::string, Tally> by_suite;
  for (const auto& r : results) {
    by_group[r.group].add(r.status);
    by_suite[r.suite].add(r.status);
  }
  std::printf("%-28s %7s %7s %11s %6s\n", "op", "passed", "failed", "unsupported", "total");
  for (const auto& [g, t] : by_group)
    std::printf("%-28s %7d %7d %11d %6d\n", g.c_str(), t.passed, t.failed, t.unsupported, t.total());
  std::printf("\n%-28s %7s %7s %11s %6s\n", "suite", "passed", "failed", "unsupported", "total");
  Tally all;
  for (const char* suite : kSuites) {
    const Tally& t = by_suite[suite];
    all.passed += t.passed, all.failed += t.failed, all.unsupported += t.unsupported;
    std::printf("%-28s %7d %7d %11d %6d\n", suite, t.passed, t.failed, t.unsupported, t.total());
  }
  std::printf("%-28s %7d %7d %11d %6d   (%.1f s)\n", "all", all.passed, all.failed, all.unsupported, all.total(),
              seconds);

  if (!o.json.empty()) {
    nlohmann::ordered_json j;
    for (const char* suite : kSuites)
      j[suite] = {{"passed", by_suite[suite].passed}, {"total", by_suite[suite].total()}};
    j["seconds"] = seconds;
    nlohmann::ordered_json cases = nlohmann::ordered_json::array();
    for (const auto& r : results) {
      nlohmann::ordered_json c = {{"suite", r.suite},
                                  {"name", r.name},
                                  {"op", r.group},
                                  {"status", conformance::status_name(r.status)},
                                  {"detail", r.detail}};
      if (r.status != Status::Unsupported) c["max_abs_error"] = r.max_abs_error;
      cases.push_back(c);
    }
    j["cases"] = cases;
    ember::app::write_json(o.json, j);
  }
  std::set<std::string> passed;
  for (const auto& r : results)
    if (r.status == Status::Passed) passed.insert(r.suite + "/" + r.name);
  if (!o.write_pass_list.empty()) {
    std::string text;
    for (const auto& p : passed) text += p + "\n";
    ember::app::write_text(o.write_pass_list, text);
  }
  if (!o.expect_pass_list.empty()) {
    std::map<std::string, const CaseResult*> by_name;
    for (const auto& r : results) by_name[r.suite + "/" + r.name] = &r;
    int lost = 0;
    for (const auto& e : expected) {
      if (passed.count(e)) continue;
      auto it = by_name.find(e);
      if (it == by_name.end() && !o.filter.empty()) continue;  // filtered out, not lost
      ++lost;
      std::fprintf(stderr, "onnx_conformance: %s no longer passes: %s\n", e.c_str(),
                   it == by_name.end() ? "no such case" : it->second->detail.c_str());
    }
    if (lost > 0) {
      std::fprintf(stderr, "onnx_conformance: %d case(s) of %s no longer pass\n", lost, o.expect_pass_list.c_str());
      return ember::app::kExitFailure;
    }
    std::printf("every case of %s passes (%zu listed, %zu passing)\n", o.expect_pass_list.c_str(), expected.size(),
                passed.size());
  }
  return ember::app::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App cli{
      "Runs ONNX's backend test data (node, pytorch-converted, pytorch-operator, simple) through Ember's ONNX "
      "importer and reports passed, failed and unsupported cases per op"};
  ember::app::input_dir(cli.add_option("--data", o.data, "the folder holding the suites (libonnx-testdata)"));
  ember::app::output_file(cli.add_option("--json", o.json, "write totals and every case's result as JSON"));
  cli.add_option("--filter", o.filter, "run only the cases whose suite/name contains this");
  ember::app::output_file(
      cli.add_option("--write-pass-list", o.write_pass_list, "write the passing cases, one suite/case a line"));
  ember::app::input_file(
      cli.add_option("--expect-pass-list", o.expect_pass_list, "exit 1 if a case this file lists does not pass"));
  cli.add_flag("--verbose", o.verbose, "print each case that does not pass, and why");
  return ember::app::run_main("onnx_conformance", cli, argc, argv, [&] { return run(o); });
}
