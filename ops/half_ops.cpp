// The marks of ops/half_ops.h: which kernel tables' kernels, per device
// type, compute bfloat16 and float16 natively. Written at static
// initialisation only, read afterwards, so no lock; a few dozen entries at
// most, searched only for 16-bit inputs.
#include <ember/ops/half_ops.h>

#include <utility>
#include <vector>

namespace ember {
namespace {

std::vector<std::pair<const void*, DeviceType>>& marks() {
  static std::vector<std::pair<const void*, DeviceType>> m;  // constructed on first use: any init order
  return m;
}

}  // namespace

void register_half_kernel(const void* table, DeviceType type) { marks().emplace_back(table, type); }

bool takes_half_kernel(const void* table, DeviceType type) {
  for (const auto& [t, d] : marks())
    if (t == table && d == type) return true;
  return false;
}

}  // namespace ember
