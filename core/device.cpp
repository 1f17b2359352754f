// Device parsing and printing.
#include <ember/core/device.h>

#include <ember/core/error.h>

namespace ember {

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    type = DeviceType::CPU;
    index = 0;
    return;
  }
  if (spec.rfind("cuda", 0) == 0) {
    type = DeviceType::CUDA;
    index = 0;
    if (spec.size() == 4) return;
    if (spec[4] == ':' && spec.size() > 5 && spec.find_first_not_of("0123456789", 5) == std::string::npos) {
      index = std::stoi(spec.substr(5));
      return;
    }
  }
  throw ValueError("invalid device '" + spec + "': expected 'cpu', 'cuda' or 'cuda:N'");
}

std::string Device::str() const {
  if (type == DeviceType::CPU) return "cpu";
  return "cuda:" + std::to_string(index);
}

}  // namespace ember
