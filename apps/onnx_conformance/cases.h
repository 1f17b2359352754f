// ONNX's backend test cases run through ember::onnx: one case is a folder
// with model.onnx and test_data_set_N/{input_K.pb, output_K.pb}; running it
// loads the model, feeds every data set and compares every output with the
// expected one (cases.cpp). main.cpp walks the suites and reports.
#pragma once

#include <string>
#include <vector>

namespace conformance {

enum class Status { Passed, Failed, Unsupported };
const char* status_name(Status s);

struct CaseResult {
  std::string suite;  // node, pytorch-converted, pytorch-operator, simple
  std::string name;   // the case folder, e.g. test_add_bcast
  std::string group;  // what the per-op table groups it under (the op type for a one-node case)
  Status status = Status::Failed;
  std::string detail;  // why it failed or is unsupported, or "" when it passed
  double max_abs_error = 0;
};

// Runs the case in dir (suite and name for the report). Never throws: every
// exception becomes a failed or unsupported result.
CaseResult run_case(const std::string& dir, const std::string& suite, const std::string& name);

}  // namespace conformance
