/// \file
/// The CUDA backend's side of graph memory (cuda/context.cu), for
/// cuda/graph.cu: while a graph is captured on a thread, that thread's
/// allocations on the device come from the graph's own pool.
#pragma once

namespace ember::cuda::detail {

/// A new pool; this thread's allocations on device come from it until end_graph_pool().
void* begin_graph_pool(int device);
/// This thread allocates from the shared cache again; the pool lives on.
void end_graph_pool();
/// The graph is gone: the pool's free blocks are returned, blocks still
/// held by tensors are returned when those tensors are freed.
void release_graph_pool(void* pool);
/// While on, this thread's pool allocations are new blocks, never one the
/// capture freed (core/cuda_graph.h's replay_buffer).
void fresh_pool_blocks(bool on);
/// Whether this thread is capturing for device (its allocations go to a pool).
bool capturing_pool(int device);
/// The error record of the capture under way on this thread for device
/// (null outside one): device memory [found, value, size] that an op
/// checking indices on the device fills when it finds an entry out of
/// range; zeroed at the start of each replay and read after it
/// (cuda/graph.cu).
unsigned long long* graph_error_record(int device);

}  // namespace ember::cuda::detail
