// onnxruntime as a reference for the ONNX tests: run_onnxruntime runs a model
// file on named inputs with onnxruntime-node (npm's CPU build, which
// scripts/setup.sh installs) through tools/onnx_run.js, and returns its
// outputs by name. The tensors cross as safetensors files in a private
// temporary directory: Ember writes them with save_safetensors and reads the
// answer with load_safetensors, so no other format or binding is involved.
//
// Integer inputs are sent as int64 (the only integer dtype Ember has) and the
// tool casts them to the integer type the model declares; it is run with
// --int64 so that integer outputs come back as int64 too.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <ember/core/error.h>
#include <ember/core/safetensors.h>
#include <ember/core/tensor.h>

namespace test {

/// onnxruntime could not run the model (or node, the tool or the package is
/// missing); the message holds the tool's one-line error.
class OnnxRuntimeError : public ember::Error {
 public:
  using ember::Error::Error;
};

namespace detail {

// A word for /bin/sh: single-quoted, with each ' closed, escaped and reopened.
inline std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A directory of its own under the system's temporary directory, removed
// when this goes out of scope, whatever happened inside.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ember_ort_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw OnnxRuntimeError("run_onnxruntime: cannot create a directory like " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

}  // namespace detail

/// Where onnxruntime-node is: $EMBER_NPM_DIR when set (a worktree without
/// its own .cache), else the checkout's .cache/npm/node_modules.
inline std::string npm_dir() {
  const char* env = std::getenv("EMBER_NPM_DIR");
  return env && *env ? env : EMBER_NPM_DIR;
}

/// Runs the ONNX model at `model` in onnxruntime on `inputs` (by graph input
/// name; every non-initializer input must be given, and nothing else) and
/// returns every graph output by name. Throws OnnxRuntimeError with the
/// tool's message when node, onnxruntime-node, the model or the run fails.
inline std::map<std::string, ember::Tensor> run_onnxruntime(const std::string& model,
                                                            const std::map<std::string, ember::Tensor>& inputs) {
  detail::TempDir dir;
  const std::string in = dir.file("inputs.safetensors"), out = dir.file("outputs.safetensors");
  const std::string err = dir.file("stderr.txt");
  ember::StateDict sd(inputs.begin(), inputs.end());
  ember::save_safetensors(in, sd);
  const std::string cmd = "EMBER_NPM_DIR=" + detail::sh_quote(npm_dir()) + " node " +
                          detail::sh_quote(std::string(EMBER_TOOLS_DIR) + "/onnx_run.js") + " --int64 " +
                          detail::sh_quote(model) + " " + detail::sh_quote(in) + " " + detail::sh_quote(out) +
                          " < /dev/null > /dev/null 2> " + detail::sh_quote(err);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::string why = detail::read_text(err);
    // The shell's 127: no node on PATH (its own message is in err too).
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 127) why = "node is not installed (run scripts/setup.sh): " + why;
    if (why.empty()) why = "exit status " + std::to_string(rc);
    throw OnnxRuntimeError("onnxruntime on " + model + ": " + why);
  }
  std::map<std::string, ember::Tensor> result;
  for (auto& [name, t] : ember::load_safetensors(out)) result.emplace(name, t);
  return result;
}

}  // namespace test
