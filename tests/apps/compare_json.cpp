// Compares numbers in two JSON files (metrics.json, eval.json of the demo
// apps) within a tolerance, for the CTest scripts that check a run on one
// device against the same run on another (cmake/*_cuda.cmake): CMake's
// scripting language has no floating-point arithmetic.
//
//   compare_json A.json B.json RTOL ATOL POINTER...
//
// Each POINTER is a JSON pointer (/per_epoch/train_loss) to a number or an
// array of numbers in both files; a pair passes when |a - b| <= ATOL + RTOL |a|.
// Prints every compared pair; exits 1 on a mismatch or a missing key, 2 on
// bad arguments.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

using json = nlohmann::json;

namespace {

json read(const char* path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(std::string("cannot open ") + path);
  return json::parse(f);
}

std::vector<double> numbers(const json& v, const std::string& where) {
  if (v.is_number()) return {v.get<double>()};
  if (!v.is_array()) throw std::runtime_error(where + " is neither a number nor an array");
  std::vector<double> out;
  for (const json& x : v) {
    if (!x.is_number()) throw std::runtime_error(where + " holds a non-number: " + x.dump());
    out.push_back(x.get<double>());
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: compare_json A.json B.json RTOL ATOL POINTER...\n");
    return 2;
  }
  try {
    const json a = read(argv[1]), b = read(argv[2]);
    const double rtol = std::stod(argv[3]), atol = std::stod(argv[4]);
    bool ok = true;
    for (int k = 5; k < argc; ++k) {
      const json::json_pointer p(argv[k]);
      const std::vector<double> x = numbers(a.at(p), std::string(argv[1]) + argv[k]);
      const std::vector<double> y = numbers(b.at(p), std::string(argv[2]) + argv[k]);
      if (x.size() != y.size()) {
        std::printf("%s: %zu values vs %zu\n", argv[k], x.size(), y.size());
        ok = false;
        continue;
      }
      for (size_t i = 0; i < x.size(); ++i) {
        const double d = std::fabs(x[i] - y[i]);
        const bool close = d <= atol + rtol * std::fabs(x[i]);  // NaN fails
        std::printf("%s[%zu]: %.9g vs %.9g (difference %.3g)%s\n", argv[k], i, x[i], y[i], d,
                    close ? "" : "  MISMATCH");
        ok = ok && close;
      }
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_json: %s\n", e.what());
    return 1;
  }
}
