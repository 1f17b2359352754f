// Storage: a reference-counted block of device memory that tensors view.
//
// Views of one tensor share one Storage; its version counter is bumped by
// every in-place write, which is how autograd notices that a tensor saved for
// backward was modified afterwards (PyTorch shares the counter between views
// in the same way). Memory comes from the Allocator registered for the
// device type, so a backend brings its own (CUDA's caching allocator).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <ember/core/device.h>

namespace ember {

// Bytes in use by tensors (allocated), held from the system including cached
// free blocks (reserved), the high-water mark of allocated since the last
// reset, and how many requests went to the system versus the cache.
struct MemoryStats {
  size_t allocated = 0;
  size_t reserved = 0;
  size_t peak_allocated = 0;
  uint64_t raw_allocs = 0;
  uint64_t cache_hits = 0;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes, int device_index) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, int device_index) = 0;
  virtual MemoryStats stats(int /*device_index*/) { return {}; }
  virtual void reset_peak(int /*device_index*/) {}
  virtual void empty_cache(int /*device_index*/) {}
};

// The allocator for a device type. CPU's is built in; others are registered
// by their backend. Throws DeviceError when no backend provides one.
Allocator* allocator_for(DeviceType type);
void register_allocator(DeviceType type, Allocator* allocator);

// Statistics of the device's allocator (both CPU and CUDA cache freed blocks;
// see caching_allocator.h), like torch.cuda.memory_stats.
MemoryStats memory_stats(Device device = Device());
void reset_peak_memory_stats(Device device = Device());
// Returns the cached free blocks to the system (torch.cuda.empty_cache).
void empty_cache(Device device = Device());

class Storage {
 public:
  // Allocates nbytes on device (64-byte aligned on the CPU).
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  uint64_t version_ = 0;
};

}  // namespace ember
