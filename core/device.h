/// \file
/// Where a tensor's memory lives: the CPU, or a CUDA device with an index.
///
/// Every kernel table in Ember is indexed by DeviceType, so a backend plugs in
/// by registering an allocator and kernels for its type (see dispatch.h);
/// callers never branch on the device themselves.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace ember {

/// The kinds of device; every kernel table has one slot per kind.
enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
/// Number of DeviceType values (the size of a kernel table).
inline constexpr int kNumDeviceTypes = 2;

/// "cpu" or "cuda".
constexpr const char* device_type_name(DeviceType t) { return t == DeviceType::CPU ? "cpu" : "cuda"; }

/// A device: its type and, for CUDA, its index ("cuda:1").
struct Device {
  DeviceType type = DeviceType::CPU;  ///< cpu or cuda
  int index = 0;                      ///< the CUDA device number (0 for the CPU)

  constexpr Device() = default;
  /// Device t, number i.
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT: implicit by design
  /// Parses "cpu", "cuda", "cuda:1"; throws ValueError otherwise.
  ///@{
  Device(const std::string& spec);                         // NOLINT
  Device(const char* spec) : Device(std::string(spec)) {}  // NOLINT
  ///@}

  /// Whether this is the CPU or a CUDA device.
  ///@{
  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  ///@}
  /// Same type and index.
  ///@{
  constexpr bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  constexpr bool operator!=(const Device& o) const { return !(*this == o); }
  ///@}
  /// "cpu", or "cuda:N".
  std::string str() const;
};

/// The CPU.
inline constexpr Device kCPU{DeviceType::CPU, 0};

/// Prints str().
inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace ember
