// What every fuzz target checks about a reader: it returns, or it throws an
// IOError whose message names the file. Any other exception escapes
// LLVMFuzzerTestOneInput (libFuzzer reports it as a crash), and an IOError
// without the name aborts; either way the input is kept as an artifact.
// Also the seed writers' one argument.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <ember/core/error.h>

namespace fuzz {

template <class Read>
void expect_success_or_io_error(const char* name, Read&& read) {
  try {
    read();
  } catch (const ember::IOError& e) {
    if (!std::strstr(e.what(), name)) {
      std::fprintf(stderr, "IOError without the file's name (%s): %s\n", name, e.what());
      std::abort();
    }
  }
}

// Reads every byte, so a buffer shorter than its reader claims shows up
// under AddressSanitizer.
inline void touch(const void* data, size_t n) {
  volatile unsigned char sink = 0;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) sink = sink ^ p[i];
}

// Aborts with a message (a broken promise of the reader, not a bad input).
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "%s\n", what);
  std::abort();
}

// A seeds_NAME program's only argument: the directory to write seeds into.
inline std::string seed_dir(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    std::exit(2);
  }
  return argv[1];
}

}  // namespace fuzz
