// libFuzzer target: the safetensors reader (core/safetensors.h) over
// arbitrary bytes. A bad file must be rejected with an IOError naming the
// file; anything else (another exception, a crash, a sanitizer report, a
// leak, an allocation beyond -rss_limit_mb) fails the run.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include <ember/core/safetensors.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> metadata;
  try {
    const ember::StateDict sd = ember::load_safetensors_from_memory(data, size, "fuzz.safetensors", &metadata);
    // Read every loaded element back, so a tensor smaller than its shape
    // claims shows up under AddressSanitizer.
    volatile unsigned char sink = 0;
    for (const auto& [name, t] : sd) {
      const auto* p = static_cast<const unsigned char*>(t.data_ptr());
      const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
      for (size_t i = 0; i < n; ++i) sink = sink ^ p[i];
    }
  } catch (const ember::IOError& e) {
    if (!std::strstr(e.what(), "fuzz.safetensors")) {
      std::fprintf(stderr, "IOError without the file's name: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
