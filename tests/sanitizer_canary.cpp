// Proves the sanitizer build catches what it claims to (make test-sanitize
// registers one CTest test per mode, passing only on the sanitizer's report):
// a heap overflow, a leak, and signed overflow. Built only with EMBER_SANITIZE.
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  volatile int sink = 0;
  if (std::strcmp(mode, "overflow") == 0) {
    int* p = new int[4];
    sink = p[sink + 4];  // one past the end
    delete[] p;
  } else if (std::strcmp(mode, "leak") == 0) {
    void* volatile p = std::malloc(64);
    p = nullptr;
  } else if (std::strcmp(mode, "ub") == 0) {
    volatile int big = INT_MAX;
    sink = big + 1;
  }
  std::printf("no report (%d)\n", sink);
  return 0;
}
