/// \file
/// Data-parallel training: DistributedDataParallel wraps any Module so that
/// N processes, each on its own shard of every batch, train one model (the
/// process group and collectives are ops/collective.h; each rank's shard of
/// the data comes from data::DistributedSampler, nn/data_loader.h).
///
/// \code
///   distributed::init();                                    // under mpirun -np N
///   auto model = std::make_shared<Net>();
///   nn::DistributedDataParallel ddp(model);                 // rank 0's weights everywhere
///   optim::AdamW opt(model->parameters(), {1e-3});
///   for (...) {                                             // each rank: its own batch of B
///     opt.zero_grad();
///     cross_entropy(ddp(x), y).backward();                  // gradients averaged over ranks
///     ddp.synchronize();                                    // (a no-op when backward finished it)
///     opt.step();
///   }
/// \endcode
///
/// What it guarantees: every rank starts from rank 0's parameters and
/// buffers, and after each backward every rank holds the mean of the ranks'
/// gradients, so with a mean loss over equal per-rank batches of B one step
/// on N ranks equals one step of a single process on the N*B samples
/// (within float rounding: the mean is summed in another order), and the
/// ranks' parameters stay identical step after step.
///
/// How: parameters are grouped into buckets of about bucket_cap_mb (in
/// reverse registration order, roughly the order backward produces their
/// gradients; one dtype and device per bucket). A post-accumulate-grad hook
/// on each parameter (core/autograd.h) marks its gradient ready; when all of a
/// bucket's gradients are ready the bucket is flattened and its all-reduce
/// started (MPI_Iallreduce / ncclAllReduce) while backward goes on. Buckets
/// start strictly in order, so every rank issues the same collectives in the
/// same order whatever order its gradients arrive in. The last bucket, with
/// nothing left to overlap, is reduced at once (MPI_Allreduce); then the
/// hook waits for the others and writes the averaged gradients back, so
/// backward() returns with the work done.
/// synchronize() finishes a pass in which some parameters received no
/// gradient (reducing zeros for them); call it before the optimizer step
/// when a model may leave parameters unused.
///
/// no_sync() turns the hooks off in its scope: gradients accumulate locally
/// (gradient accumulation over micro-batches), and the first backward after
/// it averages the accumulated sums.
///
/// Before anything is exchanged the constructor compares the ranks' models
/// with one small all-gather (parameter and buffer count, element count, a
/// hash of names, shapes, dtypes and devices); ranks that disagree all throw
/// ValueError naming the first differing entry of each rank, instead of
/// hanging or averaging unrelated tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ember/nn/module.h>
#include <ember/ops/collective.h>

namespace ember::nn {

/// How DistributedDataParallel buckets gradients and treats buffers.
struct DDPOptions {
  /// Target size of a gradient bucket in MiB (one all-reduce each). Smaller
  /// buckets start sooner (more overlap with backward); larger ones make
  /// fewer calls.
  double bucket_cap_mb = 1.0;
  /// forward() broadcasts rank 0's buffers (BatchNorm's running statistics)
  /// before running the module, as PyTorch does.
  bool broadcast_buffers = true;
};

/// Wraps a module for data-parallel training (see the file comment): rank
/// 0's weights everywhere at the start, gradients averaged over the ranks
/// after every backward. Registers the module as its child "module", so its
/// own parameter names are PyTorch's ("module.fc.weight").
class DistributedDataParallel : public Module {
 public:
  /// Initialises the process group if needed, checks the ranks' models agree,
  /// broadcasts rank 0's parameters and buffers, and installs the hooks.
  explicit DistributedDataParallel(std::shared_ptr<Module> module, DDPOptions options = {});
  ~DistributedDataParallel() override;

  /// The wrapped module's forward (after broadcasting buffers). Calling the
  /// module directly also works: the hooks are on its parameters.
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "DistributedDataParallel"; }
  /// The wrapped module.
  Module& module() { return *module_; }

  /// Finishes the gradient averaging of the last backward: waits for the
  /// buckets in flight, reduces the buckets that never filled (parameters
  /// without a gradient count as zeros) and writes the means into grad().
  /// Does nothing when backward already finished it, or under no_sync().
  void synchronize();

  /// Within its lifetime backward does not communicate; gradients accumulate
  /// locally until the first backward after it.
  class NoSync {
   public:
    /// Turns ddp's communication off until destroyed.
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(&ddp) { ++ddp_->no_sync_depth_; }
    ~NoSync() {
      if (ddp_) --ddp_->no_sync_depth_;
    }
    /// Moves the guard (no_sync() returns it).
    NoSync(NoSync&& o) noexcept : ddp_(o.ddp_) { o.ddp_ = nullptr; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    DistributedDataParallel* ddp_;
  };
  /// `auto guard = ddp.no_sync();`: no communication while guard lives.
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  /// The buckets, as lists of indices into the module's parameters() (those
  /// that require grad), in the order they are reduced.
  std::vector<std::vector<size_t>> bucket_layout() const;

 private:
  struct Entry {  // a parameter that requires grad
    Tensor tensor;
    std::string name;
    size_t bucket = 0;
    int64_t offset = 0;  // in the bucket's flat buffer
    bool ready = false;
    uint64_t hook = 0;
  };
  struct Bucket {
    std::vector<size_t> entries;
    Tensor flat;
    size_t pending = 0;  // parameters not yet ready in this pass
    distributed::Work work;
  };

  void check_consistent_models() const;
  void build_buckets(double cap_mb);
  void on_gradient_ready(size_t entry);
  void launch(size_t bucket);
  void finish();

  std::shared_ptr<Module> module_;
  DDPOptions options_;
  std::vector<Entry> entries_;
  std::vector<Bucket> buckets_;
  size_t next_bucket_ = 0;  // the next bucket to start, in order
  bool pass_open_ = false;  // a gradient arrived since the last finish()
  int no_sync_depth_ = 0;
};

}  // namespace ember::nn
