/// \file
/// Kernel tables for copying and filling, which core's Tensor methods use.
#pragma once

#include <ember/core/dispatch.h>
#include <ember/core/tensor.h>

namespace ember {

/// dst = src elementwise on one device: src already of dst's shape (may be a
/// broadcast view), dtypes may differ (converted), any strides.
extern KernelTable<void(const Tensor& src, Tensor& dst)> copy_kernel;
/// Copies between different devices; registered by a non-CPU backend under
/// its own DeviceType and used whenever either side lives there. Both sides
/// are contiguous and of one dtype.
///@{
extern KernelTable<void(const Tensor& src, Tensor& dst)> cross_device_copy_kernel;
extern KernelTable<void(Tensor& dst, double value)> fill_kernel;
///@}

}  // namespace ember
