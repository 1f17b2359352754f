// Storage and the allocator registry, with the CPU allocator.
#include <ember/core/storage.h>

#include <cstdlib>
#include <new>

#include <ember/core/error.h>

namespace ember {
namespace {

// 64-byte alignment: a cache line, and what AVX-512 loads want.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, int) override {
    if (nbytes == 0) return nullptr;
    const size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p, size_t, int) override { std::free(p); }
};

CpuAllocator cpu_allocator;
// Constant-initialised so backends can register from static initialisers.
Allocator* allocators[kNumDeviceTypes] = {&cpu_allocator, nullptr};

}  // namespace

Allocator* allocator_for(DeviceType type) {
  Allocator* a = allocators[static_cast<int>(type)];
  EMBER_CHECK(a != nullptr, DeviceError, "no ", device_type_name(type),
              " backend: Ember was built without it (configure with EMBER_CUDA=ON and a CUDA toolkit)");
  return a;
}

void register_allocator(DeviceType type, Allocator* allocator) {
  allocators[static_cast<int>(type)] = allocator;
}

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(allocator_for(device.type)) {
  data_ = allocator_->allocate(nbytes, device.index);
}

Storage::~Storage() {
  if (data_) allocator_->deallocate(data_, nbytes_, device_.index);
}

}  // namespace ember
