// The NCCL transport of the collectives (ops/collective.h) for CUDA tensors:
// built into ember_cuda with EMBER_NCCL (cmake/distributed.cmake); never
// into the emulated backend, which has no NCCL.
//
// One communicator per process, created at the first collective on a CUDA
// tensor (every rank reaches it in the same call): rank 0 makes NCCL's
// unique id and MPI carries it to the others (the processes already know
// their rank and world size from MPI), then ncclCommInitRank. Each process
// drives one GPU, normally cuda:local_rank(). NCCL calls are queued on the
// device's one Ember stream (cuda::stream), so they are ordered after the
// kernels that produced their input and before those that read the result:
// waiting for a collective costs the host nothing.
#include <nccl.h>

#include <mutex>
#include <string>

#include <ember/core/error.h>
#include <ember/core/tensor.h>
#include <ember/cuda/common.h>
#include <ember/ops/collective.h>

namespace ember::cuda {
namespace {

struct NcclState {
  std::mutex mu;
  ncclComm_t comm = nullptr;
  int device = -1;
};
NcclState& nccl() {
  static NcclState* s = new NcclState;  // never destroyed: shut down from distributed::finalize()
  return *s;
}

[[noreturn]] void throw_nccl(const char* call, const char* file, int line, ncclResult_t r) {
  std::string msg =
      std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + ncclGetErrorString(r);
  if (nccl().comm) {
    const char* last = ncclGetLastError(nccl().comm);
    if (last && *last) msg += std::string(" (") + last + ")";
  }
  throw DeviceError(msg);
}
#define EMBER_NCCL_CHECK(call)                                                                \
  do {                                                                                        \
    const ncclResult_t ember_nccl_rc_ = (call);                                               \
    if (ember_nccl_rc_ != ncclSuccess) throw_nccl(#call, __FILE__, __LINE__, ember_nccl_rc_); \
  } while (0)

ncclComm_t comm_for(int device) {
  NcclState& s = nccl();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.comm) {
    EMBER_CHECK(s.device == device, DeviceError, "NCCL: this process's communicator is on cuda:", s.device,
                ", but the tensor is on cuda:", device, "; use one GPU per process (cuda:local_rank())");
    return s.comm;
  }
  ncclUniqueId id{};
  if (distributed::rank() == 0) EMBER_NCCL_CHECK(ncclGetUniqueId(&id));
  distributed::detail::broadcast_bytes(&id, sizeof id, 0);
  set_device(device);
  EMBER_NCCL_CHECK(ncclCommInitRank(&s.comm, distributed::world_size(), id, distributed::rank()));
  s.device = device;
  return s.comm;
}

void shutdown() {
  NcclState& s = nccl();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.comm) return;
  set_device(s.device);
  synchronize(s.device);
  ncclCommDestroy(s.comm);
  s.comm = nullptr;
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Int64:
      return ncclInt64;
    case DType::Bool:
      return ncclUint8;
    case DType::BFloat16:
      return ncclBfloat16;
    case DType::Float16:
      return ncclFloat16;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(distributed::ReduceOp op) {
  switch (op) {
    case distributed::ReduceOp::Max:
      return ncclMax;
    case distributed::ReduceOp::Min:
      return ncclMin;
    default:
      return ncclSum;  // Mean reaches kernels as Sum
  }
}

void nccl_broadcast(Tensor& t, int root) {
  const int d = t.device().index;
  ncclComm_t c = comm_for(d);
  EMBER_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root,
                                 c, stream(d)));
}

// Finished when the stream passed the event recorded after the collective;
// waiting needs nothing beyond stream order, only a check for NCCL's
// asynchronous errors (a peer that failed).
struct NcclWork final : distributed::Work::Impl {
  cudaEvent_t done = nullptr;
  ncclComm_t comm = nullptr;
  Tensor buffer;  // kept alive until the stream is past the collective
  ~NcclWork() override {
    if (done) cudaEventDestroy(done);
  }
  bool test() override {
    const cudaError_t e = cudaEventQuery(done);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    EMBER_CUDA_CHECK(e);
    return true;
  }
  void wait() override {
    ncclResult_t async = ncclSuccess;
    EMBER_NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
    EMBER_NCCL_CHECK(async);
  }
};

// Stream-ordered either way: blocking changes nothing.
distributed::Work nccl_all_reduce(Tensor& t, distributed::ReduceOp op, bool /*blocking*/) {
  const int d = t.device().index;
  auto w = std::make_shared<NcclWork>();
  w->comm = comm_for(d);
  w->buffer = t;
  EMBER_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                                 nccl_op(op), w->comm, stream(d)));
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&w->done, cudaEventDisableTiming));
  EMBER_CUDA_CHECK(cudaEventRecord(w->done, stream(d)));
  return distributed::Work(std::move(w));
}

void nccl_all_gather(const Tensor& in, Tensor& out) {
  const int d = in.device().index;
  EMBER_CHECK(out.device() == in.device(), DeviceError, "all_gather: input on ", in.device().str(), ", output on ",
              out.device().str());
  EMBER_NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()),
                                 comm_for(d), stream(d)));
}

struct RegisterNccl {
  RegisterNccl() { distributed::detail::register_device_backend("nccl", shutdown); }
} g_register_nccl;

}  // namespace

EMBER_REGISTER_KERNEL(distributed::broadcast_kernel, CUDA, nccl_broadcast);
EMBER_REGISTER_KERNEL(distributed::all_reduce_kernel, CUDA, nccl_all_reduce);
EMBER_REGISTER_KERNEL(distributed::all_gather_kernel, CUDA, nccl_all_gather);

}  // namespace ember::cuda
