/// \file
/// A caching allocator: freed blocks go to per-device free lists keyed by size
/// class and are handed out again, so a training loop that allocates the same
/// shapes every step stops calling the system allocator after its first step.
/// CPU uses it over aligned_alloc (for large tensors glibc would otherwise
/// mmap and munmap each one, paying page faults on every step); the CUDA
/// backend uses it over cudaMalloc, as PyTorch does.
///
/// Size classes: a request is rounded up to one of four steps per power of two
/// (2^k, 1.25 2^k, 1.5 2^k, 1.75 2^k), so at most 25% is wasted and blocks of
/// nearby sizes share a list. Thread-safe (a data-loader thread allocates too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <ember/core/storage.h>

namespace ember {

/// An Allocator that keeps freed blocks in per-device free lists by size class; a backend derives it
/// and supplies raw_allocate/raw_free.
class CachingAllocator : public Allocator {
 public:
  CachingAllocator() = default;
  ~CachingAllocator() override = default;  ///< cached blocks are left to process exit

  /// The Allocator interface, served from the cache when a block of the size class is free.
  ///@{
  void* allocate(size_t nbytes, int device_index) override;
  void deallocate(void* ptr, size_t nbytes, int device_index) override;
  MemoryStats stats(int device_index) override;
  void reset_peak(int device_index) override;
  void empty_cache(int device_index) override;
  ///@}

  /// Caching off: every block goes straight back (for sanitizer runs, where a
  /// reused block would hide a use after free). EMBER_CACHING_ALLOCATOR=0 sets it.
  void set_enabled(bool on);

  /// The size a request of nbytes is rounded up to (one of four steps per power of two).
  static size_t size_class(size_t nbytes);

 protected:
  virtual void* raw_allocate(size_t nbytes, int device_index) = 0;  ///< nullptr when out of memory
  /// Returns a block to the system.
  virtual void raw_free(void* ptr, size_t nbytes, int device_index) = 0;

 private:
  struct Pool {
    std::unordered_map<size_t, std::vector<void*>> free_blocks;  // size class -> blocks
    MemoryStats stats;
  };
  Pool& pool(int device_index);
  void release_all(Pool& p, int device_index);

  std::mutex mu_;
  std::vector<Pool> pools_;
  bool enabled_ = true;
  bool env_read_ = false;
};

}  // namespace ember
