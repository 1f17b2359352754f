/// \file
/// What the bf16 GEMM's source files share; not part of the API (that is
/// ops/bgemm_avx512.h). The GEMM is four files: ops/bgemm_avx512.cpp (the
/// checks, the choice of path, the bf16 conversions and the float32
/// fallback), ops/bgemm_kernel_avx512.cpp (the AVX512_BF16 kernel: register
/// blocks and tasks), ops/bgemm_pack_avx512.h (its packing) and
/// ops/bgemm_peak.cpp (the register-only peak loops). Here: the x86 switch and the kernel's target attribute, the
/// parallel threshold, the per-thread scratch arrays, and the kernel's entry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <ember/core/storage.h>
#include <ember/ops/bgemm_avx512.h>

#if defined(__x86_64__) || defined(__i386__)
#define EMBER_BGEMM_X86 1
#define EMBER_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#else
#define EMBER_BGEMM_X86 0
#endif

namespace ember::cpu::bgemm_detail {

// Products below this many multiply-adds run on the caller (as matmul's
// kParallelWork, ops/matmul_cpu.cpp): waking the pool costs more.
constexpr int64_t kParallelWork = int64_t(1) << 19;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A 64-byte aligned scratch array that keeps its memory between calls on a
// thread, up to kKeep bytes. A larger one (GPT-2's 50257 x 768 embedding
// packed as op(B): 77 MB) is a block of the CPU's caching allocator, given
// back when the call ends (trim) and found there at the next call: freed to
// the system instead, its pages were faulted in and zeroed again at every
// call, which made the lm_head's products 4-5x slower than the kernel
// (docs/PERFORMANCE.md, "The bf16 GEMM").
struct Scratch {
  static constexpr size_t kKeep = size_t(16) << 20;
  std::unique_ptr<unsigned char[]> mem;
  size_t cap = 0;
  void* big = nullptr;  // the caching allocator's block, when the array is larger than kKeep
  size_t big_bytes = 0;
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { trim(); }
  void* get(size_t bytes) {
    if (bytes > kKeep) {
      if (bytes > big_bytes) {
        trim();
        big = allocator_for(DeviceType::CPU)->allocate(bytes, 0);  // 64-byte aligned
        big_bytes = bytes;
      }
      return big;
    }
    if (bytes > cap) {
      mem.reset(new unsigned char[bytes + 64]);
      cap = bytes;
    }
    return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(mem.get()) + 63) & ~uintptr_t(63));
  }
  void trim() {
    if (big) allocator_for(DeviceType::CPU)->deallocate(big, big_bytes, 0);
    big = nullptr;
    big_bytes = 0;
  }
};

/// The AVX512_BF16 kernel (ops/bgemm_kernel_avx512.cpp), for a product bgemm
/// has checked; on a non-x86 build it does nothing and is never called.
void bgemm_kernel(const BgemmArgs& g);

}  // namespace ember::cpu::bgemm_detail
