// The MPI transport of the collectives (collective.h), compiled when
// EMBER_MPI found an MPI library (EMBER_HAVE_MPI; without it this file is
// empty and a process is a world of one): MPI_Init, a private duplicate of
// MPI_COMM_WORLD (so a user's own MPI traffic never matches ours), the byte
// exchanges, and the CPU kernels. MPI errors come back as DeviceError naming
// the call (MPI_ERRORS_RETURN) instead of aborting the job.
//
// Threads: MPI_THREAD_FUNNELED. Only the thread that called init() talks to
// MPI; Ember's pool threads run kernels and the data loader's worker fills
// batches, neither calls MPI.
#include <ember/ops/collective.h>

#if defined(EMBER_HAVE_MPI)
#include <mpi.h>

#include <climits>
#include <string>

#include <ember/core/error.h>

namespace ember::distributed {
namespace {

MPI_Comm g_comm = MPI_COMM_NULL;
bool g_we_initialised = false;

[[noreturn]] void throw_mpi(const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw DeviceError(ember::detail::cat_str(call, " failed: ", std::string(text, static_cast<size_t>(len))));
}
#define EMBER_MPI_CHECK(call)                                          \
  do {                                                                 \
    const int ember_mpi_rc_ = (call);                                  \
    if (ember_mpi_rc_ != MPI_SUCCESS) throw_mpi(#call, ember_mpi_rc_); \
  } while (0)

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::Float32:
      return MPI_FLOAT;
    case DType::Float64:
      return MPI_DOUBLE;
    case DType::Int64:
      return MPI_INT64_T;
    case DType::Bool:
      return MPI_C_BOOL;
    case DType::BFloat16:
    case DType::Float16:
      // MPI has no 16-bit float type (nor its sum); the caller converts.
      throw DTypeError(ember::detail::cat_str("distributed (MPI): ", dtype_name(t),
                                              " tensors are not supported; convert to float32 first"));
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
    default:
      return MPI_SUM;  // Mean reaches kernels as Sum
  }
}

// MPI counts are ints.
int count(const Tensor& t, const char* op) {
  EMBER_CHECK(t.numel() <= INT_MAX, ValueError, "distributed::", op, ": ", t.numel(),
              " elements exceed one MPI call's count (", INT_MAX, "); split the tensor");
  return static_cast<int>(t.numel());
}

int byte_count(size_t n) {
  EMBER_CHECK(n <= static_cast<size_t>(INT_MAX), ValueError, "distributed: ", n, " bytes exceed one MPI call");
  return static_cast<int>(n);
}

// ---- the host transport ----------------------------------------------------
detail::LaunchInfo mpi_init() {
  int initialised = 0;
  EMBER_MPI_CHECK(MPI_Initialized(&initialised));
  if (!initialised) {
    int provided = 0;
    EMBER_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
    g_we_initialised = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  EMBER_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g_comm));
  EMBER_MPI_CHECK(MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN));
  detail::LaunchInfo info;
  EMBER_MPI_CHECK(MPI_Comm_rank(g_comm, &info.rank));
  EMBER_MPI_CHECK(MPI_Comm_size(g_comm, &info.world_size));
  // The processes that share this machine's memory: local_rank picks a GPU.
  MPI_Comm local = MPI_COMM_NULL;
  EMBER_MPI_CHECK(MPI_Comm_split_type(g_comm, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &local));
  EMBER_MPI_CHECK(MPI_Comm_rank(local, &info.local_rank));
  MPI_Comm_free(&local);
  return info;
}

void mpi_finalize() {
  if (g_comm != MPI_COMM_NULL) MPI_Comm_free(&g_comm);
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (g_we_initialised && !finalised) MPI_Finalize();  // a program that initialised MPI itself finalises it
}

void mpi_barrier() { EMBER_MPI_CHECK(MPI_Barrier(g_comm)); }

void mpi_abort(int code) { MPI_Abort(g_comm, code); }

void mpi_broadcast_bytes(void* data, size_t n, int root) {
  EMBER_MPI_CHECK(MPI_Bcast(data, byte_count(n), MPI_BYTE, root, g_comm));
}

void mpi_all_gather_bytes(const void* in, void* out, size_t n) {
  EMBER_MPI_CHECK(MPI_Allgather(in, byte_count(n), MPI_BYTE, out, byte_count(n), MPI_BYTE, g_comm));
}

constexpr detail::HostTransport kMpi{
    "mpi", mpi_init, mpi_finalize, mpi_barrier, mpi_abort, mpi_broadcast_bytes, mpi_all_gather_bytes};

// ---- CPU kernels --------------------------------------------------------------
void cpu_broadcast(Tensor& t, int root) {
  EMBER_MPI_CHECK(MPI_Bcast(t.data_ptr(), count(t, "broadcast"), mpi_type(t.dtype()), root, g_comm));
}

// A nonblocking all-reduce: Open MPI progresses it inside MPI calls, so
// test() (MPI_Test) is what moves it on while backward runs.
struct MpiWork final : Work::Impl {
  MPI_Request request = MPI_REQUEST_NULL;
  Tensor buffer;  // kept alive until the reduction finished
  bool test() override {
    int done = 0;
    EMBER_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }
  void wait() override { EMBER_MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE)); }
};

Work cpu_all_reduce(Tensor& t, ReduceOp op, bool blocking) {
  if (blocking) {
    EMBER_MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), count(t, "all_reduce"), mpi_type(t.dtype()), mpi_op(op), g_comm));
    return Work();
  }
  auto w = std::make_shared<MpiWork>();
  w->buffer = t;
  EMBER_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), count(t, "all_reduce"), mpi_type(t.dtype()), mpi_op(op),
                                 g_comm, &w->request));
  return Work(std::move(w));
}

void cpu_all_gather(const Tensor& in, Tensor& out) {
  const int n = count(in, "all_gather");
  EMBER_MPI_CHECK(
      MPI_Allgather(in.data_ptr(), n, mpi_type(in.dtype()), out.data_ptr(), n, mpi_type(in.dtype()), g_comm));
}

}  // namespace

const detail::HostTransport* detail::mpi_transport() { return &kMpi; }

EMBER_REGISTER_KERNEL(broadcast_kernel, CPU, cpu_broadcast);
EMBER_REGISTER_KERNEL(all_reduce_kernel, CPU, cpu_all_reduce);
EMBER_REGISTER_KERNEL(all_gather_kernel, CPU, cpu_all_gather);

}  // namespace ember::distributed

#endif  // EMBER_HAVE_MPI
