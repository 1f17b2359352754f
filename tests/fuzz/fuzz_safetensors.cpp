// libFuzzer target: the safetensors reader (core/safetensors.h) over
// arbitrary bytes. A bad file must be rejected with an IOError naming the
// file; anything else (another exception, a crash, a sanitizer report, a
// leak, an allocation beyond -rss_limit_mb) fails the run.
#include <cstdint>
#include <map>
#include <string>

#include <ember/core/safetensors.h>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_success_or_io_error("fuzz.safetensors", [&] {
    std::map<std::string, std::string> metadata;
    const ember::StateDict sd = ember::load_safetensors_from_memory(data, size, "fuzz.safetensors", &metadata);
    for (const auto& [name, t] : sd) fuzz::touch(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  });
  return 0;
}
