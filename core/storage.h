/// \file
/// Storage: a reference-counted block of device memory that tensors view.
///
/// Views of one tensor share one Storage; its version counter is bumped by
/// every in-place write, which is how autograd notices that a tensor saved for
/// backward was modified afterwards (PyTorch shares the counter between views
/// in the same way). Memory comes from the Allocator registered for the
/// device type, so a backend brings its own (CUDA's caching allocator).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <ember/core/device.h>

namespace ember {

/// Bytes in use by tensors (allocated), held from the system including cached
/// free blocks (reserved), the high-water mark of allocated since the last
/// reset, and how many requests went to the system versus the cache.
struct MemoryStats {
  size_t allocated = 0;       ///< bytes held by live tensors
  size_t reserved = 0;        ///< bytes held from the system, cached free blocks included
  size_t peak_allocated = 0;  ///< the most allocated since the last reset_peak_memory_stats
  uint64_t raw_allocs = 0;    ///< requests that went to the system allocator
  uint64_t cache_hits = 0;    ///< requests served from the cache
};

/// Where a device type's memory comes from; one per device type (register_allocator).
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// A block of nbytes on device device_index, and its release (given the same size).
  ///@{
  virtual void* allocate(size_t nbytes, int device_index) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, int device_index) = 0;
  ///@}
  /// Statistics (none unless the allocator keeps them).
  virtual MemoryStats stats(int /*device_index*/) { return {}; }
  /// Restarts the peak_allocated count.
  virtual void reset_peak(int /*device_index*/) {}
  /// Returns cached free blocks to the system.
  virtual void empty_cache(int /*device_index*/) {}
};

/// The allocator for a device type. CPU's is built in; others are registered
/// by their backend. Throws DeviceError when no backend provides one.
///@{
Allocator* allocator_for(DeviceType type);
void register_allocator(DeviceType type, Allocator* allocator);
///@}

/// Statistics of the device's allocator (both CPU and CUDA cache freed blocks;
/// see caching_allocator.h), like torch.cuda.memory_stats.
///@{
MemoryStats memory_stats(Device device = Device());
void reset_peak_memory_stats(Device device = Device());
///@}
/// Returns the cached free blocks to the system (torch.cuda.empty_cache).
void empty_cache(Device device = Device());

/// A block of device memory shared by a tensor and its views, with their version counter.
class Storage {
 public:
  /// Allocates nbytes on device (64-byte aligned on the CPU).
  ///@{
  Storage(size_t nbytes, Device device);
  /// Memory that something else owns (a file mapped by
  /// map_safetensors, core/safetensors.h): data stays valid while owner
  /// lives, and the storage holds owner until it is destroyed. data may be
  /// aligned to its elements only.
  Storage(void* data, size_t nbytes, Device device, std::shared_ptr<const void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ///@}

  /// The memory, its size and its device.
  ///@{
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  ///@}

  /// The version counter: in-place writes bump it, SavedTensor compares it.
  ///@{
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }
  ///@}

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // null: owner_ holds the memory
  std::shared_ptr<const void> owner_;
  uint64_t version_ = 0;
};

}  // namespace ember
