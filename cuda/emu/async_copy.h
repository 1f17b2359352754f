/// \file
/// The SIMT emulator's primitives behind cuda/mma.cuh's emulated ldmatrix
/// and cp.async: a named whole-warp rendezvous, the running block's dynamic
/// shared memory bounds and serial (cuda/emu/simt.cpp), and the pending
/// 16-byte copies of each CUDA thread with their commit groups
/// (cuda/emu/async_copy.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ember::emu {

/// Every lane of the calling warp meets, as __syncwarp(0xffffffff) does; a
/// lane that does not exist or never arrives is a DeviceError naming what.
void warp_collective(const char* what);

/// Whether [p, p + bytes) lies in the running block's dynamic shared memory.
bool in_dynamic_shared(const void* p, size_t bytes);

/// A number no other block run of the process shares.
uint64_t block_serial();

/// cp.async of 16 bytes: the first src_bytes (0 or 16) of src are read now,
/// the rest are zeros; the 16 bytes reach dst when a cp_async_wait completes
/// their group, not before (a kernel that reads dst without waiting sees
/// the old contents). commit closes the calling thread's pending copies
/// into a group; wait(n) completes all but its n most recent groups. dst
/// must be 16-byte aligned in dynamic shared memory, src 16-byte aligned
/// (a DeviceError otherwise).
///@{
void cp_async(void* dst, const void* src, int src_bytes);
void cp_async_commit();
void cp_async_wait(int n);
///@}

}  // namespace ember::emu
