// The process group and the collective ops (see collective.h): reading the
// launcher's environment, the checks every collective makes, the world-of-one
// fast paths, Mean as Sum and a scale, and strided tensors through a
// contiguous buffer. The transports themselves are kernels: MPI in
// collective_mpi.cpp, NCCL in cuda/collective_nccl.cpp.
#include <ember/ops/collective.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/autograd.h>
#include <ember/core/error.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/pointwise.h>

namespace ember::distributed {

decltype(broadcast_kernel) broadcast_kernel("broadcast");
decltype(all_reduce_kernel) all_reduce_kernel("all_reduce");
decltype(all_gather_kernel) all_gather_kernel("all_gather");

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Mean:
      return "mean";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

// ---- the process group ----------------------------------------------------------
namespace {

struct DeviceBackend {
  const char* name;
  void (*shutdown)();
};

struct Group {
  bool initialized = false, finalized = false;
  detail::LaunchInfo info;
  const detail::HostTransport* transport = nullptr;  // null: a world of one
  std::vector<DeviceBackend> device_backends;
};
Group& group() {
  static Group* g = new Group;  // never destroyed: finalize() may run from atexit
  return *g;
}

// What a launcher tells the processes it starts. The rank variable alone
// marks a launched process; the size, where the launcher gives one, lets a
// build without MPI refuse to train alone.
struct Launcher {
  const char* name;
  const char* rank_var;
  const char* size_var;
};
constexpr Launcher kLaunchers[] = {
    {"mpirun (Open MPI)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"a PMI launcher (MPICH's mpiexec, Intel MPI)", "PMI_RANK", "PMI_SIZE"},
    {"srun (Slurm)", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"},
    {"a PMIx launcher", "PMIX_RANK", nullptr},
};

struct LaunchEnv {
  const Launcher* launcher = nullptr;
  long rank = 0, size = 1;
};
LaunchEnv launch_env() {
  LaunchEnv e;
  for (const Launcher& l : kLaunchers) {
    const char* r = std::getenv(l.rank_var);
    if (!r) continue;
    e.launcher = &l;
    e.rank = std::strtol(r, nullptr, 10);
    const char* s = l.size_var ? std::getenv(l.size_var) : nullptr;
    e.size = s ? std::strtol(s, nullptr, 10) : 1;
    break;
  }
  return e;
}

void finalize_at_exit() {
  try {
    finalize();
  } catch (const Error&) {  // exit must not throw; MPI reports its own failures
  }
}

void require_group(const char* op) {
  const Group& g = group();
  EMBER_CHECK(g.initialized && !g.finalized, ValueError, "distributed::", op, ": the process group is ",
              g.finalized ? "finalised" : "not initialised; call distributed::init() first");
}

}  // namespace

void init() {
  Group& g = group();
  if (g.initialized) return;
  EMBER_CHECK(!g.finalized, ValueError, "distributed::init: the process group was finalised; it cannot be reopened");
  const LaunchEnv env = launch_env();
  if (env.launcher) {
    const detail::HostTransport* t = detail::mpi_transport();
    EMBER_CHECK(t || env.size <= 1, DeviceError, "distributed::init: this process was started by ", env.launcher->name,
                " as rank ", env.rank, " of ", env.size,
                ", but Ember was built without MPI (EMBER_MPI=OFF, or no MPI was found at configure time), so it "
                "would train alone: install libopenmpi-dev and rebuild with -DEMBER_MPI=ON");
    if (t) {
      g.info = t->init();
      g.transport = t;
      std::atexit(finalize_at_exit);
      EMBER_CHECK(env.size <= 1 || g.info.world_size == env.size, DeviceError,
                  "distributed::init: ", env.launcher->name, " started ", env.size,
                  " processes, but MPI_Init reports a world of ", g.info.world_size,
                  ": the program's MPI library is not the launcher's (e.g. a program built against "
                  "MPICH started by Open MPI's mpirun); use the mpirun of the MPI Ember was built with");
    }
  }
  g.initialized = true;
}

bool is_initialized() { return group().initialized && !group().finalized; }

void finalize() {
  Group& g = group();
  if (!g.initialized || g.finalized) return;
  g.finalized = true;
  for (const DeviceBackend& b : g.device_backends) b.shutdown();
  if (g.transport) g.transport->finalize();
}

int rank() { return group().info.rank; }
int world_size() { return group().info.world_size; }
int local_rank() { return group().info.local_rank; }
std::string backend() { return group().transport ? group().transport->name : "none"; }
bool mpi_available() { return detail::mpi_transport() != nullptr; }
bool nccl_available() {
  for (const DeviceBackend& b : group().device_backends)
    if (std::string(b.name) == "nccl") return true;
  return false;
}

void barrier() {
  require_group("barrier");
  if (world_size() > 1) group().transport->barrier();
}

void abort(int code) {
  const Group& g = group();
  if (g.transport && g.initialized && !g.finalized && world_size() > 1) g.transport->abort(code);
  std::exit(code);
}

namespace detail {
void register_device_backend(const char* name, void (*shutdown)()) {
  group().device_backends.push_back({name, shutdown});
}

void broadcast_bytes(void* data, size_t n, int root) {
  require_group("broadcast_bytes");
  if (world_size() > 1) group().transport->broadcast_bytes(data, n, root);
}

void all_gather_bytes(const void* in, void* out, size_t n) {
  require_group("all_gather_bytes");
  if (world_size() > 1) {
    group().transport->all_gather_bytes(in, out, n);
  } else if (n > 0) {
    std::memcpy(out, in, n);
  }
}

std::vector<std::string> all_gather_strings(const std::string& mine) {
  // Lengths first, then every string padded to the longest.
  const auto world = static_cast<size_t>(world_size());
  const uint64_t len = mine.size();
  std::vector<uint64_t> lens(world);
  all_gather_bytes(&len, lens.data(), sizeof len);
  uint64_t longest = 0;
  for (uint64_t l : lens) longest = std::max(longest, l);
  std::string padded = mine;
  padded.resize(longest, '\0');
  std::string all(longest * world, '\0');
  all_gather_bytes(padded.data(), all.data(), longest);
  std::vector<std::string> out;
  for (size_t r = 0; r < world; ++r) out.push_back(all.substr(r * longest, lens[r]));
  return out;
}
}  // namespace detail

// ---- Work -------------------------------------------------------------------------
bool Work::test() {
  if (impl_ && !impl_->test()) return false;
  wait();  // finished: run the continuation now
  return true;
}

void Work::wait() {
  if (impl_) {
    impl_->wait();
    impl_.reset();
  }
  if (then_) {
    const std::function<void()> f = std::move(then_);
    then_ = nullptr;
    f();
  }
}

Work& Work::then(std::function<void()> f) {
  if (!then_) {
    then_ = std::move(f);
  } else {
    then_ = [first = std::move(then_), second = std::move(f)] {
      first();
      second();
    };
  }
  return *this;
}

// ---- the collectives ------------------------------------------------------------------
namespace {
// A contiguous tensor with t's values to hand to a kernel: t itself when it
// is contiguous, else a copy that the caller writes back.
Tensor contiguous_buffer(const Tensor& t) { return t.detach().contiguous(); }

void finish_in_place(Tensor& t, const Tensor& buf) {
  NoGradGuard no_grad;
  if (buf.is_same(t) || buf.storage() == t.storage()) {
    t.bump_version();
  } else {
    t.copy_(buf);
  }
}
}  // namespace

void broadcast(Tensor& t, int root) {
  require_group("broadcast");
  check_inplace("broadcast", t);
  EMBER_CHECK(root >= 0 && root < world_size(), IndexError, "distributed::broadcast: root ", root,
              " is not a rank of this world of ", world_size());
  if (world_size() == 1) return;
  Tensor buf = contiguous_buffer(t);
  broadcast_kernel(buf.device(), buf, root);
  finish_in_place(t, buf);
}

namespace {
// Both forms of all_reduce: a transport may block when asked to (Open MPI's
// MPI_Allreduce is about twice as fast as MPI_Iallreduce + MPI_Wait on this
// machine for the ViT's 556 KB of gradients).
Work start_all_reduce(Tensor& t, ReduceOp op, bool blocking) {
  require_group("all_reduce");
  check_inplace("all_reduce", t);
  EMBER_CHECK(t.dtype() != DType::Bool, DTypeError, "distributed::all_reduce: bool tensors are not reduced (shape ",
              t.shape().str(), "); convert to int64 first");
  EMBER_CHECK(op != ReduceOp::Mean || t.is_floating_point(), DTypeError, "distributed::all_reduce: mean of a ",
              dtype_name(t.dtype()), " tensor (shape ", t.shape().str(),
              ") would truncate; use Sum, or a floating dtype");
  if (world_size() == 1) return Work();
  Tensor buf = contiguous_buffer(t);
  Work w = all_reduce_kernel(buf.device(), buf, op == ReduceOp::Mean ? ReduceOp::Sum : op, blocking);
  const int world = world_size();
  w.then([t, buf, op, world]() mutable {
    NoGradGuard no_grad;
    if (op == ReduceOp::Mean) mul_(buf, 1.0 / world);
    finish_in_place(t, buf);
  });
  return w;
}
}  // namespace

Work all_reduce_async(Tensor& t, ReduceOp op) { return start_all_reduce(t, op, false); }

void all_reduce(Tensor& t, ReduceOp op) { start_all_reduce(t, op, true).wait(); }

Tensor all_gather(const Tensor& t) {
  require_group("all_gather");
  Shape shape = t.shape();
  shape.insert(0, world_size());
  const Tensor in = contiguous_buffer(t);
  Tensor out = empty(shape, TensorOptions(t.dtype(), t.device()));
  if (world_size() == 1) {
    NoGradGuard no_grad;
    out.copy_(in.unsqueeze(0));
  } else {
    all_gather_kernel(in.device(), in, out);
  }
  return out;
}

// Without MPI there is no host transport: init() makes a world of one (or
// refuses a launch of several), and no collective reaches a kernel.
#if !defined(EMBER_HAVE_MPI)
const detail::HostTransport* detail::mpi_transport() { return nullptr; }
#endif

}  // namespace ember::distributed
