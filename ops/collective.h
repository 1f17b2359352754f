/// \file
/// Collective communication on tensors, for data-parallel training: the
/// process group (this process's rank among world_size processes), and
/// barrier, broadcast, all_reduce and all_gather across the processes.
///
/// Ember does no networking of its own: CPU tensors travel through MPI
/// (ops/collective_mpi.cpp, built when EMBER_MPI finds an MPI library), CUDA
/// tensors through NCCL (cuda/collective_nccl.cu, built with EMBER_NCCL).
/// Both register kernels into the tables below, as any backend does, so a
/// collective finds its transport from the tensor's device.
///
/// \code
///   distributed::init();                       // under mpirun / srun: MPI_Init
///   Tensor g = ...;
///   distributed::all_reduce(g, distributed::ReduceOp::Mean);
///   if (distributed::rank() == 0) save(...);
/// \endcode
///
/// init() reads the launcher's environment: started by mpirun or srun it
/// initialises MPI and takes the rank and world size from it; started on its
/// own, the process is a world of one and calls no MPI at all (every
/// collective is then the identity). A process started as one of several by
/// a launcher while Ember was built without MPI throws instead of training
/// alone. Every rank must call the same collectives in the same order with
/// tensors of the same shape and dtype, as in MPI itself; the model-level
/// checks (DistributedDataParallel) verify shapes with one small collective
/// before relying on them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ember/core/dispatch.h>
#include <ember/core/tensor.h>

namespace ember::distributed {

/// How all_reduce combines the ranks' tensors, elementwise.
enum class ReduceOp : uint8_t { Sum, Mean, Max, Min };
/// "sum", "mean", "max", "min".
const char* reduce_op_name(ReduceOp op);

// ---- the process group --------------------------------------------------------
/// Initialises the process group from the launcher's environment (see above);
/// calling it again does nothing. MPI is finalised at exit (or by finalize()).
void init();
/// Whether init() ran and finalize() did not.
bool is_initialized();
/// Releases the device backends' communicators (NCCL) and finalises MPI;
/// later collectives throw. Registered to run at exit by init(); with NCCL,
/// call it before main returns, while the CUDA runtime is still up.
void finalize();
/// This process's rank in [0, world_size()), and the number of processes; 0
/// and 1 before init().
///@{
int rank();
int world_size();
///@}
/// The rank among the processes on this machine (for choosing a GPU).
int local_rank();
/// The transport that init() chose: "mpi" or "none" (a world of one).
std::string backend();
/// Whether this build has MPI (EMBER_MPI) and NCCL (EMBER_NCCL, registered by
/// the CUDA backend when it is linked).
///@{
bool mpi_available();
bool nccl_available();
///@}

/// Blocks until every rank reached it.
void barrier();

/// Ends every rank's process with exit code `code` (MPI_Abort): for a rank
/// that cannot go on while the others may be waiting for it in a collective,
/// where returning from main would leave them waiting (MPI_Finalize waits
/// for every rank). In a world of one, std::exit(code).
[[noreturn]] void abort(int code);

// ---- collectives on tensors -------------------------------------------------------
/// Each is in place on t (any strides) or returns a new tensor, is not
/// recorded by autograd (use it under NoGradGuard on tensors that require
/// grad, as any in-place op), and bumps t's version.

/// Copies root's t into every rank's t.
void broadcast(Tensor& t, int root = 0);
/// t becomes the elementwise Sum / Mean / Max / Min of every rank's t. Mean
/// needs a floating dtype; bool tensors are not reduced.
void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
/// Every rank's t stacked along a new first dim: (world_size, t.shape()...).
Tensor all_gather(const Tensor& t);

/// A collective in flight. wait() returns once its result is in the tensor
/// (for CUDA tensors: in stream order, so kernels queued after it see it);
/// test() says whether it has finished and drives MPI's progress, which
/// otherwise happens only inside MPI calls.
class Work {
 public:
  /// What a transport gives back for a collective it started.
  struct Impl {
    virtual ~Impl() = default;
    virtual bool test() = 0;  ///< finished?
    virtual void wait() = 0;  ///< returns once finished
  };
  /// A finished collective (the world-of-one case, or a blocking transport).
  Work() = default;
  /// The transport's handle of a collective in flight.
  explicit Work(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  /// Whether the collective finished (then its continuation has run).
  bool test();
  /// Waits for the collective and runs its continuation.
  void wait();
  /// Run by wait() once the transport finished (scaling for Mean, copying a
  /// contiguous buffer back into a strided tensor).
  Work& then(std::function<void()> f);
  /// Whether wait() has something left to do.
  bool pending() const { return impl_ != nullptr || then_ != nullptr; }

 private:
  std::shared_ptr<Impl> impl_;
  std::function<void()> then_;
};

/// all_reduce started without waiting for it; t must stay alive and
/// untouched until wait().
[[nodiscard]] Work all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum);

// ---- the transport seam ---------------------------------------------------------
/// Kernels take contiguous tensors, of the same shape and dtype on every rank,
/// and see only Sum, Max and Min (Mean is Sum, then a scale), and only when
/// world_size() > 1. all_reduce_kernel may finish before returning when
/// `blocking` (the caller waits at once) and must not when it is false.
///@{
extern KernelTable<void(Tensor& t, int root)> broadcast_kernel;
extern KernelTable<Work(Tensor& t, ReduceOp op, bool blocking)> all_reduce_kernel;
extern KernelTable<void(const Tensor& in, Tensor& out)> all_gather_kernel;
///@}

namespace detail {
/// Raw bytes between the processes over the host transport (MPI): for
/// backends that bootstrap over it (NCCL's unique id) and for consistency
/// checks. all_gather_bytes: n bytes per rank into out (world_size() * n).
void broadcast_bytes(void* data, size_t n, int root);
void all_gather_bytes(const void* in, void* out, size_t n);
/// Every rank's string, in rank order (lengths may differ).
std::vector<std::string> all_gather_strings(const std::string& mine);

/// What the MPI build provides (ops/collective_mpi.cpp); null without MPI.
struct LaunchInfo {
  int rank = 0, world_size = 1, local_rank = 0;
};
struct HostTransport {
  const char* name;
  LaunchInfo (*init)();
  void (*finalize)();
  void (*barrier)();
  void (*abort)(int code);
  void (*broadcast_bytes)(void* data, size_t n, int root);
  void (*all_gather_bytes)(const void* in, void* out, size_t n);
};
const HostTransport* mpi_transport();

/// A backend that holds communicators (NCCL) registers a function to release
/// them before MPI is finalised, and says it exists (nccl_available()).
void register_device_backend(const char* name, void (*shutdown)());
}  // namespace detail

}  // namespace ember::distributed
