/// \file
/// Kernel tables: how an op finds the kernel for its inputs' device.
///
/// Each op family declares one KernelTable per kernel signature, e.g.
///
/// \code
///   KernelTable<void(const Tensor& x2, ..., Tensor& y2)> layer_norm_kernel("layer_norm");   // ops/norm.h
/// \endcode
///
/// and each backend registers its function for its DeviceType:
///
/// \code
///   EMBER_REGISTER_KERNEL(layer_norm_kernel, CPU, cpu_layer_norm);    // ops/norm_cpu.cpp
///   EMBER_REGISTER_KERNEL(layer_norm_kernel, CUDA, cuda_layer_norm);  // cuda/norm.cu
/// \endcode
///
/// Calling the table with a device is one array load and an indirect call: no
/// string lookup, no virtual dispatch chain. A missing kernel is a DeviceError
/// naming the op and the device at the call, never a silent fallback. User ops
/// defined outside the library use exactly the same two lines.
#pragma once

#include <chrono>
#include <type_traits>
#include <utility>

#include <ember/core/anomaly.h>
#include <ember/core/device.h>
#include <ember/core/error.h>
#include <ember/core/profiler.h>

namespace ember {

template <class Fn>
class KernelTable;

/// A table of kernels with signature R(Args...), one per device type, named for errors and the profiler.
template <class R, class... Args>
class KernelTable<R(Args...)> {
 public:
  /// The kernel's function type.
  using Fn = R (*)(Args...);
  /// constexpr so tables are constant-initialised: registrations in other
  /// translation units may run before or after this one's dynamic init.
  explicit constexpr KernelTable(const char* op_name) : name_(op_name) {}

  /// Registers fn for a device type (EMBER_REGISTER_KERNEL calls it).
  void set(DeviceType type, Fn fn) { fns_[static_cast<int>(type)] = fn; }
  /// Whether a kernel is registered for a device type.
  bool has(DeviceType type) const { return fns_[static_cast<int>(type)] != nullptr; }
  /// The op name given at construction.
  const char* name() const { return name_; }

  /// The kernel of device's type; throws DeviceError naming the op and the device when none is registered.
  Fn get(Device device) const {
    Fn fn = fns_[static_cast<int>(device.type)];
    EMBER_CHECK(fn != nullptr, DeviceError, name_, ": no kernel for device ", device.str(),
                " is registered in this program (EMBER_REGISTER_KERNEL(<table>, ", device.is_cuda() ? "CUDA" : "CPU",
                ", fn) registers one",
                device.is_cuda() ? "; Ember's own CUDA kernels come with linking its CUDA backend" : "",
                "; docs/CUSTOM_OPS.md)");
    return fn;
  }

  /// Calls the kernel of device with args (through the profiler and anomaly checks when they are on).
  template <class... A>
  R operator()(Device device, A&&... args) const {
    // One load and one branch for every hook (profiler, anomaly mode).
    if (__builtin_expect(detail::kernel_hooks() != 0, 0)) return hooked(device, std::forward<A>(args)...);
    return get(device)(std::forward<A>(args)...);
  }

 private:
  template <class... A>
  R hooked(Device device, A&&... args) const {
    if (detect_anomaly() && !in_anomaly_check()) {
      // Arguments are classified by the kernel's own parameter types (Args),
      // not by how the caller passed them.
      AnomalyCheck check(name_);
      (check.template before<Args>(args), ...);
      if constexpr (std::is_void_v<R>) {
        timed(device, std::forward<A>(args)...);
        (check.template after<Args>(args), ...);
      } else {
        R r = timed(device, std::forward<A>(args)...);
        (check.template after<Args>(args), ...);
        return r;
      }
    } else {
      return timed(device, std::forward<A>(args)...);
    }
  }

  template <class... A>
  R timed(Device device, A&&... args) const {
    const Fn fn = get(device);
    if (!profiler::enabled()) return fn(std::forward<A>(args)...);
    // Device time on an asynchronous device: wait for it before and after.
    const bool sync = !device.is_cpu() && profiler::synchronizing();
    if (sync) profiler::detail::synchronize(device);
    const auto t0 = std::chrono::steady_clock::now();
    struct Stop {  // records on every exit, the exceptional one included
      const char* name;
      std::chrono::steady_clock::time_point t0;
      Device device;
      bool sync;
      ~Stop() {
        if (sync) profiler::detail::synchronize(device);
        profiler::record_kernel(name, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    } stop{name_, t0, device, sync};
    return fn(std::forward<A>(args)...);
  }

  const char* name_;
  Fn fns_[kNumDeviceTypes] = {};
};

/// Marks table's kernel for device type as computing bfloat16 and float16
/// tensors itself (load as float32, compute and accumulate in float32, store
/// rounded), at static initialisation through EMBER_REGISTER_HALF_KERNEL.
/// An op declared Half::NativeWhere with op::marked<...> (core/op.h) then
/// skips the float32 copies on that device.
void register_half_kernel(const void* table, DeviceType type);
/// Whether table's kernel for device type was marked so.
bool takes_half_kernel(const void* table, DeviceType type);
/// takes_half_kernel for a kernel table (any signature).
template <class Table>
bool takes_half(const Table& table, Device device) {
  return takes_half_kernel(&table, device.type);
}

/// Registers the mark from a static initialiser.
struct HalfKernelRegistrar {
  /// register_half_kernel(table, type).
  HalfKernelRegistrar(const void* table, DeviceType type) { register_half_kernel(table, type); }
};

/// Registers a kernel from a static initialiser (what EMBER_REGISTER_KERNEL expands to).
struct KernelRegistrar {
  /// table.set(type, fn).
  template <class Table, class Fn>
  KernelRegistrar(Table& table, DeviceType type, Fn fn) {
    table.set(type, fn);
  }
};

/// Token pasting after expansion (unique registrar names).
///@{
#define EMBER_CONCAT_IMPL(a, b) a##b
#define EMBER_CONCAT(a, b) EMBER_CONCAT_IMPL(a, b)
///@}
/// Registers fn as table's kernel for DeviceType::device at static-init time.
#define EMBER_REGISTER_KERNEL(table, device, fn)                                            \
  static ::ember::KernelRegistrar EMBER_CONCAT(ember_kernel_registrar_, __COUNTER__)(table, \
                                                                                     ::ember::DeviceType::device, fn)
/// Marks table's kernel for DeviceType::device as computing 16-bit tensors
/// itself (register_half_kernel).
#define EMBER_REGISTER_HALF_KERNEL(table, device)                                              \
  static ::ember::HalfKernelRegistrar EMBER_CONCAT(ember_half_kernel_registrar_, __COUNTER__)( \
      &(table), ::ember::DeviceType::device)

}  // namespace ember
