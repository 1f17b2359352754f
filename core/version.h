/// \file
/// Which Ember this is: the version (also the EMBER_VERSION macros in
/// <ember/ember.h>, for the preprocessor) and a one-stop description of the
/// build for bug reports: backends, BLAS, SIMD flags, threads, compiler.
#pragma once

#include <string>

namespace ember {

/// "MAJOR.MINOR.PATCH" of the library that was linked (EMBER_VERSION is that
/// of the headers compiled against; they differ only in a broken install).
const char* version();

/// Several lines, "key: value", e.g.
///   ember: 0.1.0 (Release)
///   backends: cpu
///   blas: OpenBLAS 0.3.21 DYNAMIC_ARCH ... (core Haswell)
///   simd: avx2 fma avx512f
///   threads: 2 (EMBER_NUM_THREADS or set_num_threads to change)
///   compiler: g++ 12.2.0
std::string build_info();

}  // namespace ember
