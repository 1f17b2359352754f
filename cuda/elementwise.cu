// CUDA kernels of ops/elementwise.cpp (and the activations, which share its
// functor lists): the pointwise kernel templates of ops/pointwise_kernels.h
// (unary, binary, compare for every functor of ops/functors.h, where,
// masked_fill; the same dtype rules and scalar formulas as the CPU) run over
// the CUDA elementwise loop of cuda/loops.cuh.
#include <ember/ops/pointwise_kernels.h>
#include <ember/cuda/loops.cuh>

namespace ember::cuda {
namespace {

[[maybe_unused]] const bool cuda_pointwise_registered = register_pointwise_kernels<CudaLoops>(DeviceType::CUDA);

}  // namespace
}  // namespace ember::cuda
