/// \file
/// The kernel tables of the optimizers' updates: the fused Adam/AdamW step,
/// the fused SGD step of 16-bit parameters, and the gradient norm's sum of
/// squares. The CPU kernels are in
/// ops/optimizer_kernels.cpp, the CUDA ones in cuda/optimizer.cu; they live
/// in the ops layer, below optim/, so that the CUDA backend (which sits on
/// ops alone) can register them. optim/optimizer.cpp calls them.
///
/// Adam, step t, gradient g (PyTorch 1.13, amsgrad off):
/// \code
///   Adam:  g += wd * p                 AdamW: p *= 1 - lr * wd
///   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
///   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
/// \endcode
///
/// bfloat16 and float16 parameters keep their moments (and SGD's momentum
/// buffer) in their own dtype, as PyTorch does; every kernel computes them in
/// float32 and rounds each stored value (p, m, v) once, to nearest even, or
/// p to a random neighbour with stochastic rounding (bfloat16 only): element
/// i takes word i % 4 of Philox counter offset + i / 4 under seed
/// (core/random.h), so the CPU and CUDA kernels draw the same words (and
/// on the emulator, where GCC compiles both, give the same bits).
#pragma once

#include <cstdint>
#include <vector>

#include <ember/core/dispatch.h>
#include <ember/core/half.h>
#include <ember/core/hostdevice.h>
#include <ember/core/tensor.h>

namespace ember::optim {

/// One step's hyperparameters; bias_correction1/2 are 1 - b1^t and 1 - b2^t.
struct AdamStep {
  ///@{
  double lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2;  ///< as in the formulas above
  ///@}
  bool decoupled;  ///< AdamW's weight decay (true) or Adam's L2 (false)
  /// Inside a CUDA graph (core/cuda_graph.h): device memory holding this
  /// step's lr / bias_correction1, sqrt(bias_correction2) and 1 - lr *
  /// weight_decay as float64, written before each replay; the kernel reads
  /// them there instead of the fields above. Null outside a graph.
  const double* device_scalars = nullptr;
  /// Round p stochastically (bfloat16 parameters; others ignore it).
  bool stochastic_rounding = false;
  /// The random words of stochastic rounding: the Philox key, and the first
  /// counter of this parameter's words (adam_multi_kernel reads
  /// AdamParam::offset instead).
  uint64_t seed = 0, offset = 0;
};

/// p, g, m, v: contiguous, one dtype and device, same numel.
extern KernelTable<void(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s)> adam_kernel;

/// The same step for many parameters at once (one launch for a whole group on
/// a GPU, instead of one per parameter). Every entry as above; all entries of
/// one device and dtype. Optional: a backend without it gets adam_kernel per
/// parameter (the CPU, where a launch costs nothing).
struct AdamParam {
  ///@{
  Tensor p, g, m, v;  ///< parameter, gradient, first and second moments
  ///@}
  uint64_t offset = 0;  ///< its first Philox counter (AdamStep::offset)
};
/// The multi-parameter kernel (see AdamParam).
extern KernelTable<void(std::vector<AdamParam>& params, const AdamStep& s)> adam_multi_kernel;

/// One SGD step of a parameter (torch.optim.SGD's formula):
/// \code
///   d = g + wd * p
///   momentum != 0:  buf = first ? d : momentum * buf + (1 - dampening) * d
///                   d = nesterov ? d + momentum * buf : buf
///   p -= lr * d
/// \endcode
struct SGDStep {
  ///@{
  double lr, momentum, dampening, weight_decay;  ///< as in the formula above
  ///@}
  bool nesterov;                     ///< Nesterov momentum
  bool first;                        ///< buf is uninitialised: it becomes d
  bool stochastic_rounding = false;  ///< as AdamStep's
  uint64_t seed = 0, offset = 0;     ///< as AdamStep's
};
/// p, g and buf (undefined when momentum is 0): contiguous, one dtype
/// (bfloat16 or float16) and device. float32 and float64 parameters take
/// SGD's in-place ops (optim/optimizer.cpp), each rounding to the
/// parameter's own dtype: the formula's math in that dtype.
extern KernelTable<void(Tensor& p, const Tensor& g, Tensor& buf, const SGDStep& s)> sgd_kernel;

/// float32 -> bfloat16 bits, rounded stochastically with the random word r:
/// the low 16 bits of r are added to the 16 bits bfloat16 drops, and the sum
/// truncated. The result rounds away from zero (in magnitude) with
/// probability dropped / 2^16, so its expectation is f itself: an update
/// smaller than half an ulp moves the weight on average instead of being
/// lost. Infinities stay (the carry cannot reach past 0x7F80FFFF), a value
/// within an ulp of the largest finite one may round to Inf, NaN -> 0x7FC0
/// (as core/half.h's rounding).
EMBER_HD inline uint16_t bf16_bits_stochastic(float f, uint32_t r) {
  const uint32_t u = half_detail::f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  return static_cast<uint16_t>((u + (r & 0xFFFFu)) >> 16);
}

/// SGDStep's formula on one element in A (float32 for the 16-bit types),
/// shared by the CPU and CUDA kernels so that both compute it alike: p and
/// buf come in as the stored values and leave unrounded (the caller rounds
/// each once); momentum != 0 reads buf (unless first) and writes it. The
/// decay term is skipped at weight_decay 0, as torch's (an Inf weight keeps
/// a finite step).
template <class A>
EMBER_HD inline void sgd_element(A& p, A g, A& buf, A lr, A momentum, A keep, A wd, bool nesterov, bool first) {
  A d = g;
  if (wd != A(0)) d = g + wd * p;
  if (momentum != A(0)) {
    buf = first ? d : momentum * buf + keep * d;  // keep = 1 - dampening
    d = nesterov ? d + momentum * buf : buf;
  }
  p = p - lr * d;
}

/// Sum of squares of a contiguous floating tensor, accumulated in float64:
/// the gradient norm of clip_grad_norm_ in one read of each gradient, with
/// no temporaries.
extern KernelTable<double(const Tensor& x)> sum_squares_kernel;

/// clip_grad_norm_ on the device without reading anything back (so that it
/// can be captured in a CUDA graph, and costs no synchronisation): the
/// float64 sum of squares of every gradient (in a fixed order for given
/// shapes, so deterministic), total = sqrt(sum), coef = max_norm / (total +
/// 1e-6), and every gradient times coef where coef < 1. Returns total as a
/// 0-d float64 tensor on the device. Optional: the CPU computes on the host.
extern KernelTable<Tensor(const std::vector<Tensor>& grads, double max_norm)> clip_grad_norm_kernel;

}  // namespace ember::optim
