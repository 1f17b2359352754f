// compare_safetensors EXPECTED GOT ATOL: every tensor of EXPECTED must be in
// GOT under the same name, with the same shape, and within ATOL of it
// elementwise (absolute, compared in float64; a NaN anywhere fails). Prints
// each tensor's largest difference, so the CTest log shows the figures;
// exits 1 naming what differs. The demos' --export-onnx tests compare
// Ember's outputs (FILE.expected.safetensors) with onnxruntime's this way.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include <ember/ember.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: compare_safetensors EXPECTED GOT ATOL\n");
    return 2;
  }
  try {
    const double atol = std::stod(argv[3]);
    std::map<std::string, ember::Tensor> got;
    for (auto& [name, t] : ember::load_safetensors(argv[2])) got.emplace(name, t);
    bool ok = true;
    for (const auto& [name, want] : ember::load_safetensors(argv[1])) {
      const auto it = got.find(name);
      if (it == got.end()) {
        std::printf("%s: missing from %s\n", name.c_str(), argv[2]);
        ok = false;
        continue;
      }
      if (it->second.shape() != want.shape()) {
        std::printf("%s: shape %s, expected %s\n", name.c_str(), it->second.shape().str().c_str(),
                    want.shape().str().c_str());
        ok = false;
        continue;
      }
      const std::vector<double> a = want.to(ember::kFloat64).contiguous().to_vector<double>();
      const std::vector<double> b = it->second.to(ember::kFloat64).contiguous().to_vector<double>();
      double worst = 0;
      bool nan = false;
      for (size_t i = 0; i < a.size(); ++i) {
        const double d = std::fabs(a[i] - b[i]);
        if (std::isnan(d)) nan = true;
        if (d > worst) worst = d;
      }
      const bool pass = !nan && worst <= atol;
      std::printf("%s %s: max |expected - got| %.3g over %zu values (atol %g)%s\n", pass ? "ok  " : "FAIL",
                  name.c_str(), worst, a.size(), atol, nan ? ", NaN" : "");
      ok = ok && pass;
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_safetensors: %s\n", e.what());
    return 1;
  }
}
