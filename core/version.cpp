// version() and build_info(). EMBER_VERSION_STRING and EMBER_BUILD_TYPE come
// from CMake (compile definitions on this file only, so a version bump
// rebuilds one file); the SIMD flags are the ones this file was compiled
// with, which are the library's (EMBER_NATIVE sets -march=native for all).
#include <ember/core/version.h>

#include <cblas.h>

#include <ember/core/device.h>
#include <ember/core/error.h>
#include <ember/core/parallel.h>
#include <ember/core/storage.h>

#ifndef EMBER_VERSION_STRING
#error "EMBER_VERSION_STRING must be defined by the build"
#endif

namespace ember {

const char* version() { return EMBER_VERSION_STRING; }

namespace {

std::string simd_flags() {
  std::string s;
  auto add = [&](const char* f) { s += s.empty() ? f : std::string(" ") + f; };
#ifdef __SSE4_2__
  add("sse4.2");
#endif
#ifdef __AVX__
  add("avx");
#endif
#ifdef __AVX2__
  add("avx2");
#endif
#ifdef __FMA__
  add("fma");
#endif
#ifdef __AVX512F__
  add("avx512f");
#endif
#ifdef __AVX512BW__
  add("avx512bw");
#endif
#ifdef __ARM_NEON
  add("neon");
#endif
  return s.empty() ? "baseline" : s;
}

std::string backends() {
  std::string s = "cpu";
  try {
    allocator_for(DeviceType::CUDA);  // registered only when built with the CUDA backend
    s += " cuda";
  } catch (const DeviceError&) {}
  return s;
}

}  // namespace

std::string build_info() {
  std::string s;
  const std::string build_type = EMBER_BUILD_TYPE;
  s += std::string("ember: ") + version() + " (" + (build_type.empty() ? "no build type" : build_type) + ")\n";
  s += "backends: " + backends() + "\n";
  s += std::string("blas: ") + openblas_get_config() + " (core " + openblas_get_corename() + ")\n";
  s += "simd: " + simd_flags() + "\n";
  s += "threads: " + std::to_string(num_threads()) + " (EMBER_NUM_THREADS or set_num_threads to change)\n";
#if defined(__clang__)
  s += std::string("compiler: clang++ ") + __clang_version__ + "\n";
#elif defined(__GNUC__)
  s += std::string("compiler: g++ ") + __VERSION__ + "\n";
#endif
  return s;
}

}  // namespace ember
