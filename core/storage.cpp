// Storage and the allocator registry, with the CPU allocator.
#include <ember/core/storage.h>

#include <cstdlib>
#include <new>
#include <utility>

#include <ember/core/caching_allocator.h>
#include <ember/core/error.h>

namespace ember {
namespace {

// 64-byte alignment: a cache line, and what AVX-512 loads want. Size classes
// are multiples of 64 bytes.
class CpuAllocator final : public CachingAllocator {
 protected:
  void* raw_allocate(size_t nbytes, int) override { return std::aligned_alloc(64, nbytes); }
  void raw_free(void* p, size_t, int) override { std::free(p); }
};

// Built on first use and never destroyed: tensors in static initialisers of
// other files (and at exit) may allocate and free in any order.
Allocator* cpu_allocator() {
  static Allocator* a = new CpuAllocator;
  return a;
}

// Constant-initialised so backends can register from static initialisers;
// a null CPU entry means the built-in one.
Allocator* allocators[kNumDeviceTypes] = {nullptr, nullptr};

}  // namespace

Allocator* allocator_for(DeviceType type) {
  Allocator* a = allocators[static_cast<int>(type)];
  if (!a && type == DeviceType::CPU) return cpu_allocator();
  EMBER_CHECK(a != nullptr, DeviceError, "no ", device_type_name(type),
              " backend: Ember was built without it (configure with EMBER_CUDA=ON and a CUDA toolkit)");
  return a;
}

void register_allocator(DeviceType type, Allocator* allocator) { allocators[static_cast<int>(type)] = allocator; }

MemoryStats memory_stats(Device device) { return allocator_for(device.type)->stats(device.index); }
void reset_peak_memory_stats(Device device) { allocator_for(device.type)->reset_peak(device.index); }
void empty_cache(Device device) { allocator_for(device.type)->empty_cache(device.index); }

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(allocator_for(device.type)) {
  data_ = allocator_->allocate(nbytes, device.index);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::shared_ptr<const void> owner)
    : data_(data), nbytes_(nbytes), device_(device), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (data_ && allocator_) allocator_->deallocate(data_, nbytes_, device_.index);
}

}  // namespace ember
