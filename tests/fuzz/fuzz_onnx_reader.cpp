// libFuzzer target: the ONNX reader (onnx/model_reader.cpp, ember::onnx::
// load_from_bytes) over arbitrary bytes: parsing, validation, libonnx's
// checker, initializers converted into the module's parameters. A bad file
// must be an IOError naming it, and a valid one using something Ember lacks
// an Unsupported; any other exception, a crash, a sanitizer report, a leak or
// an allocation beyond -rss_limit_mb fails the run.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include <ember/onnx/onnx.h>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    fuzz::expect_success_or_io_error("fuzz.onnx", [&] {
      const auto model = ember::onnx::load_from_bytes(bytes, "fuzz.onnx");
      for (const auto& [name, t] : model->state_dict())
        fuzz::touch(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
    });
  } catch (const ember::onnx::Unsupported& e) {
    if (!std::strstr(e.what(), "fuzz.onnx") && !std::strstr(e.what(), "(node '")) {
      std::fprintf(stderr, "Unsupported without the file's or the node's name: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
