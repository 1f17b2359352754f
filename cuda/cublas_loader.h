/// \file
/// The real CUDA backend opens cuBLAS at its first call (cuda/cublas_loader.cpp)
/// instead of linking it, so a program that never uses a GPU never pays for
/// loading it.
#pragma once

#include <string>
#include <vector>

namespace ember::cuda {

/// Opens cuBLAS if it is not open yet and looks up every entry point the
/// backend calls: empty when all resolve, else the missing symbols' names,
/// or one line saying why the library did not open. Needs no GPU.
std::vector<std::string> cublas_unresolved();

}  // namespace ember::cuda
