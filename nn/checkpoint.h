/// \file
/// Saving and loading a module's state dict as safetensors, with errors that
/// name the file and the tensor; and training checkpoints: the model, the
/// optimizer and the LR scheduler in one file under the prefixes "model.",
/// "optimizer." and "scheduler.", loaded back exactly or not at all.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <ember/core/safetensors.h>
#include <ember/nn/module.h>

namespace ember::nn {

/// Atomic: a crash mid-save leaves the previous file at path intact.
void save(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata = {});
/// Loads path into module (see Module::load_state_dict for strict).
LoadResult load(Module& module, const std::string& path, bool strict = true);

/// The entries of `in` under `prefix` ("model."), with the prefix taken off; and the reverse.
///@{
StateDict take_prefixed(const StateDict& in, const std::string& prefix);
void add_prefixed(StateDict& out, const std::string& prefix, const StateDict& in);
///@}

/// Throws IOError naming `file`, `part` and the first difference unless `reloaded` (what an object's
/// state_dict() gives after load_state_dict(stored)) holds exactly the entries of `stored`: the same
/// names, dtypes, shapes and bits. A resume that would silently reset or convert anything (a missing
/// optimizer moment, a scheduler field of another dtype or a fractional step, an entry nothing reads)
/// fails here instead.
void check_exact_reload(const StateDict& stored, const StateDict& reloaded, const std::string& file,
                        const std::string& part);

/// Names (with a reason) of the tensors of `sd` that hold NaN or Inf; for names ending in
/// "exp_avg_sq" (Adam's second moment) or "running_var" (BatchNorm's), a negative value; or a
/// magnitude of 1e19 or more (its square overflows float32): what --eval-only and --resume warn
/// about, and what a distillation teacher is refused for. One read of the bytes per tensor.
std::vector<std::string> suspicious_tensors(const StateDict& sd);

/// Called inside a catch block: rethrows the ember::Error being handled as
/// the same type (ShapeError, ValueError, ...) with `where` put before its
/// message (a file, "FILE: model state: "), so that an error from deep
/// inside a load names the file it came from and callers that catch by type
/// still can. Anything that is not an ember::Error is rethrown unchanged.
[[noreturn]] void rethrow_with_context(const std::string& where);

/// A training checkpoint: the model, optimizer and scheduler state dicts under "model.", "optimizer."
/// and "scheduler.", with `metadata` (the app's configuration, epoch, batch, RNG state), saved
/// atomically. Templates over the optimizer and scheduler types so that nn/ needs nothing of optim/.
template <class Optimizer, class Scheduler>
void save_training_checkpoint(const std::string& path, const Module& model, const Optimizer& opt,
                              const Scheduler& sched, const std::map<std::string, std::string>& metadata) {
  StateDict all;
  add_prefixed(all, "model.", model.state_dict());
  add_prefixed(all, "optimizer.", opt.state_dict());
  add_prefixed(all, "scheduler.", sched.state_dict());
  save_safetensors(path, all, metadata);
}

/// Loads a training checkpoint's tensors (`stored`, read from `file`) into model, opt and sched, each
/// checked by check_exact_reload, and refuses tensors under any other prefix.
template <class Optimizer, class Scheduler>
void load_training_checkpoint(const StateDict& stored, const std::string& file, Module& model, Optimizer& opt,
                              Scheduler& sched) {
  for (const auto& [name, t] : stored)
    if (name.rfind("model.", 0) != 0 && name.rfind("optimizer.", 0) != 0 && name.rfind("scheduler.", 0) != 0)
      throw IOError("training checkpoint '" + file + "': unexpected tensor '" + name +
                    "' (not under model., optimizer. or scheduler.)");
  const StateDict m = take_prefixed(stored, "model."), o = take_prefixed(stored, "optimizer."),
                  s = take_prefixed(stored, "scheduler.");
  // Each part's own errors (a shape, a missing entry) with the file and the part named.
  const auto load = [&](auto& part, const StateDict& d, const char* what) {
    try {
      part.load_state_dict(d);
    } catch (const Error&) {
      rethrow_with_context("training checkpoint '" + file + "': " + what + " state: ");
    }
    check_exact_reload(d, part.state_dict(), file, what);
  };
  load(model, m, "model");
  load(opt, o, "optimizer");
  load(sched, s, "scheduler");
}

}  // namespace ember::nn
