// The registries behind op descriptors (core/op.h) and the 16-bit kernel
// marks (core/dispatch.h). Both are written at static initialisation only
// and read afterwards, so neither takes a lock; each holds a few dozen
// entries and is constructed on first use, so registrations from any
// translation unit may run in any order.
#include <ember/core/op.h>

#include <cstring>

namespace ember {

namespace {
std::vector<std::pair<const void*, DeviceType>>& half_marks() {
  static std::vector<std::pair<const void*, DeviceType>> m;
  return m;
}
std::vector<const OpDef*>& ops() {
  static std::vector<const OpDef*> r;
  return r;
}
}  // namespace

void register_half_kernel(const void* table, DeviceType type) { half_marks().emplace_back(table, type); }

bool takes_half_kernel(const void* table, DeviceType type) {
  for (const auto& [t, d] : half_marks())
    if (t == table && d == type) return true;
  return false;
}

namespace op {

const std::vector<const OpDef*>& registry() { return ops(); }

void register_op(const OpDef& d) {
  EMBER_CHECK(d.name && *d.name, ValueError, "EMBER_REGISTER_OP: an op declaration needs a name");
  for (const OpDef* o : ops()) {
    if (o == &d) return;
    EMBER_CHECK(std::strcmp(o->name, d.name) != 0, ValueError, "EMBER_REGISTER_OP: two ops are named '", d.name, "'");
  }
  ops().push_back(&d);
}

const OpDef* find(const char* name) {
  for (const OpDef* o : ops())
    if (std::strcmp(o->name, name) == 0) return o;
  return nullptr;
}

}  // namespace op
}  // namespace ember
