// Module::to(dtype) and to(device, dtype): PyTorch's module.to(torch.float64)
// etc. Kept beside module.cpp's to(device), which swaps storage the same way.
#include <ember/nn/module.h>

namespace ember::nn {

Module& Module::to(DType dtype) {
  EMBER_CHECK(is_floating(dtype), DTypeError, type_name(), ".to(", dtype_name(dtype),
              "): a module converts to a floating dtype only (its floating parameters and buffers change)");
  for (auto& [name, t] : state_dict()) {
    if (!t.defined() || !t.is_floating_point() || t.dtype() == dtype) continue;
    const Tensor converted = t.detach().to(dtype);
    // Swap the storage and dtype under the existing impl: every handle
    // (layers' members, optimizers created later) sees the new dtype.
    TensorImpl* impl = t.unsafe_impl();
    impl->storage = converted.storage();
    impl->strides = converted.strides();
    impl->offset = converted.offset();
    impl->dtype = dtype;
    Tensor handle = t;
    handle.zero_grad(true);
  }
  return *this;
}

Module& Module::to(Device device, DType dtype) {
  to(device);
  return to(dtype);
}

}  // namespace ember::nn
