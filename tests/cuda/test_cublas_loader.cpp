// The real CUDA backend opens cuBLAS at its first call (cuda/cublas_loader.cpp):
// every entry point it forwards to must be in the library it opens. Loading
// the library needs no GPU, so this runs wherever the nvcc build does.
#include <doctest/doctest.h>
#include <ember/cuda/cublas_loader.h>

#include <string>
#include <vector>

TEST_CASE("cublas loader: the library opens and every entry point the backend calls resolves") {
  const std::vector<std::string> missing = ember::cuda::cublas_unresolved();
  std::string said;
  for (const std::string& m : missing) said += m + "; ";
  CHECK_MESSAGE(missing.empty(), said);
}
