/// \file
/// The op conformance harness: one row per op, run on every layout and
/// backend, with no test framework (Ember's own suite wraps it in doctest,
/// tests/test_conformance.cpp; examples/custom_op calls it from main). A row
/// names the op, describes its inputs and gives the function to test:
/// \code
///   using namespace ember::testing;
///   const std::vector<OpCase> rows = {
///       {"mul", {F({3, 4}), F({4})}, [](const In& x) { return mul(x[0], x[1]); }},
///       cpu_only({"my_op", {F({2, 3})}, [](const In& x) { return my_op(x[0]); }}, "no CUDA kernel yet"),
///   };
///   const Report r = check_rows(rows);  // r.failures: one line per failed check
/// \endcode
/// The checks, each a function of its own:
///   1. check_gradients: float64 gradcheck with contiguous inputs and with
///      non-contiguous ones (each input a transposed or strided view of a
///      larger buffer);
///   2. check_strided: non-contiguous inputs give the contiguous result;
///   3. check_backend: forward and backward on another backend ("cuda": a GPU,
///      or the SIMT emulator), with contiguous and non-contiguous inputs made
///      on that device, against the CPU in float32. An op without a kernel
///      there fails, unless its row is cpu_only(row, "why"); a cpu_only op
///      that does run there fails too, so the mark goes when the kernel comes;
///   4. check_half: bfloat16 and float16 against float32, on the CPU and on
///      every other backend where the row has kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/autograd.h>
#include <ember/core/random.h>
#include <ember/core/tensor.h>
#include <ember/ops/copy.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/gradcheck.h>
#include <ember/ops/reduce.h>

namespace ember::testing {

/// A row's inputs.
using In = std::vector<Tensor>;

/// How a row's input is made.
struct InputSpec {
  enum Kind { Float, Positive, Int, Bool } kind = Float;  ///< uniform [-2, 2), [0.5, 2), integers, booleans
  Shape shape;                                            ///< its shape
  int64_t low = 0, high = 2;                              ///< Int: values in [low, high)
  bool grad = true;                                       ///< Float/Positive: differentiate w.r.t. it
};
/// Floating values in [-2, 2), differentiated.
inline InputSpec F(Shape s) { return {InputSpec::Float, s, 0, 2, true}; }
/// Floating values in [0.5, 2): for log, sqrt, division.
inline InputSpec P(Shape s) { return {InputSpec::Positive, s, 0, 2, true}; }
/// Floating, but not differentiated (e.g. a target).
inline InputSpec C(Shape s) { return {InputSpec::Float, s, 0, 2, false}; }
/// int64 values in [low, high).
inline InputSpec I(Shape s, int64_t low, int64_t high) { return {InputSpec::Int, s, low, high, false}; }
/// Booleans.
inline InputSpec B(Shape s) { return {InputSpec::Bool, s, 0, 2, false}; }

/// One row: the op's name (it starts with the op it covers: "mul scalar"),
/// its inputs and the function under test.
struct OpCase {
  std::string name;                     ///< "op" or "op variant"
  std::vector<InputSpec> inputs;        ///< what fn receives
  std::function<Tensor(const In&)> fn;  ///< the op under test
  bool differentiable = true;           ///< gradcheck and backward comparisons
  double fwd_rtol = 1e-5;               ///< cross-backend tolerance (float32), forward
  double bwd_rtol = 1e-4;               ///< and gradients
  std::string cpu_only = "";            ///< non-empty: why no other backend has this op's kernels
  std::string half_skip = "";           ///< non-empty: no bfloat16/float16 case, and why
  double half_tol_scale = 1.0;          ///< a row with several rounded steps widens the 16-bit tolerance
};

/// A row for an op that runs on the CPU only, with the reason.
inline OpCase cpu_only(OpCase row, std::string reason) {
  row.cpu_only = std::move(reason);
  return row;
}

/// What the checks found: one line per failure, and notes (skips).
struct Report {
  std::vector<std::string> failures;  ///< "<row>: <what failed>"
  std::vector<std::string> notes;     ///< backends skipped and why
  bool ok() const { return failures.empty(); }
  void fail(const OpCase& c, std::string what) { failures.push_back(c.name + ": " + std::move(what)); }
};

/// Inputs for a row, deterministic per (row name, input), in dtype dt on
/// device. With strided = true each floating tensor is a non-contiguous view:
/// a transpose of a buffer laid out the other way (2-D and up) or every other
/// element of a longer buffer (1-D).
inline In make_inputs(const OpCase& c, DType dt, bool strided, Device device = kCPU) {
  In xs;
  uint64_t seed = 17;
  for (char ch : c.name) seed = seed * 31 + static_cast<uint64_t>(ch);
  for (const InputSpec& s : c.inputs) {
    Generator gen(seed++);
    Tensor t;
    switch (s.kind) {
      case InputSpec::Float:
        t = uniform(s.shape, -2.0, 2.0, TensorOptions(DType::Float64), &gen);
        break;
      case InputSpec::Positive:
        t = uniform(s.shape, 0.5, 2.0, TensorOptions(DType::Float64), &gen);
        break;
      case InputSpec::Int:
        t = randint(s.low, s.high, s.shape, TensorOptions(DType::Int64), &gen);
        break;
      case InputSpec::Bool:
        t = gt(rand(s.shape, TensorOptions(DType::Float64), &gen), 0.5);
        break;
    }
    const bool floating = s.kind == InputSpec::Float || s.kind == InputSpec::Positive;
    if (floating) t = t.to(dt);
    t = t.to(device);  // the same values on every device; views are made there
    if (strided && floating && t.numel() > 1) {
      Tensor view;
      if (t.dim() >= 2) {
        Tensor buf = empty(t.transpose(-1, -2).shape(), TensorOptions(dt, device));
        buf.copy_(t.transpose(-1, -2));
        view = buf.transpose(-1, -2);  // same values, transposed strides
      }
      if (!view.defined() || view.is_contiguous()) {
        // Every other element of a buffer twice as long in the first dim > 1.
        int k = 0;
        while (t.shape()[k] == 1) ++k;
        Shape bs = t.shape();
        bs[k] *= 2;
        Tensor buf = zeros(bs, TensorOptions(dt, device));
        view = buf.slice(k, 0, bs[k], 2);
        view.copy_(t);
      }
      t = view;
      EMBER_CHECK(!t.is_contiguous(), ValueError, "conformance: could not make a strided view for ", c.name);
    }
    // Leaves: a fresh handle so requires_grad_ applies to this view only.
    t = t.detach();
    if (floating && s.grad && c.differentiable) t.requires_grad_();
    xs.push_back(t);
  }
  return xs;
}

/// 1. float64 gradcheck, contiguous and non-contiguous inputs.
inline void check_gradients(const OpCase& c, Report& r) {
  if (!c.differentiable) return;
  for (const bool strided : {false, true}) {
    const GradcheckResult g = gradcheck(c.fn, make_inputs(c, DType::Float64, strided));
    if (!g.ok)
      r.fail(c, std::string("gradcheck, ") + (strided ? "non-contiguous" : "contiguous") + " inputs: " + g.message);
  }
}

/// 2. Non-contiguous inputs give the contiguous result (float32, forward).
inline void check_strided(const OpCase& c, Report& r) {
  NoGradGuard no_grad;
  const Tensor a = c.fn(make_inputs(c, DType::Float32, false));
  const Tensor b = c.fn(make_inputs(c, DType::Float32, true));
  if (a.shape() != b.shape() || !allclose(b, a, c.fwd_rtol, 1e-6))
    r.fail(c, "non-contiguous inputs give another result than contiguous ones");
}

/// The error a KernelTable throws for a device with no kernel registered.
inline bool is_missing_kernel(const DeviceError& e) {
  return std::string(e.what()).find("no kernel for device") != std::string::npos;
}

/// The absolute tolerance of a float32 comparison between backends: 1e-5 of
/// the largest magnitude in the expected tensor (at least 1e-5). Two
/// backends sum the same terms in different orders, and the rounding of a
/// sum follows the size of its terms, not of its result: one element of a
/// convolution's weight gradient (1,840 products, others of magnitude 60)
/// that nearly cancels differs by 6.5e-5 between them.
inline double backend_atol(const Tensor& expected) {
  const double m = expected.numel() ? max(abs(expected.to(DType::Float64))).item<double>() : 0.0;
  return 1e-5 * std::max(1.0, std::isfinite(m) ? m : 1.0);
}

/// 3. Forward and backward on device d against the CPU, inputs contiguous or
/// strided (made on d).
inline void check_backend(const OpCase& c, Device d, bool strided, Report& r) {
  const std::string where = " on " + d.str() + (strided ? ", non-contiguous inputs" : "");
  In cpu_in = make_inputs(c, DType::Float32, false);
  In dev_in = make_inputs(c, DType::Float32, strided, d);
  Tensor a = c.fn(cpu_in), b;
  try {
    b = c.fn(dev_in);
  } catch (const DeviceError& e) {
    if (!is_missing_kernel(e)) throw;
    if (c.cpu_only.empty())
      r.fail(c, "no kernel" + where + ": " + e.what() + " (register one, or mark the row cpu_only with the reason)");
    return;
  }
  if (!c.cpu_only.empty()) {
    r.fail(c, "runs" + where + " but its row says cpu_only (\"" + c.cpu_only + "\"): drop the mark");
    return;
  }
  if (!allclose(b.cpu(), a, c.fwd_rtol, backend_atol(a))) r.fail(c, "forward" + where + " differs from the CPU");
  if (!c.differentiable || !a.requires_grad()) return;
  Tensor w = rand(a.shape());
  sum(mul(a, w)).backward();
  try {
    sum(mul(b, w.to(d))).backward();
  } catch (const DeviceError& e) {
    if (!is_missing_kernel(e)) throw;
    r.fail(c, "no backward kernel" + where + ": " + e.what());
    return;
  }
  for (size_t i = 0; i < cpu_in.size(); ++i)
    if (cpu_in[i].requires_grad() &&
        !allclose(dev_in[i].grad().cpu(), cpu_in[i].grad(), c.bwd_rtol, backend_atol(cpu_in[i].grad())))
      r.fail(c, "gradient of input " + std::to_string(i) + where + " differs from the CPU");
}

/// The 16-bit tolerance: a few units in the last place of the dtype's 8
/// (bfloat16) or 11 (float16) significant bits, relative, plus an absolute
/// floor for results that cancel to near zero.
inline void half_tol(DType dt, double& rtol, double& atol) {
  rtol = dt == DType::BFloat16 ? 1.0 / 64 : 1.0 / 512;
  atol = dt == DType::BFloat16 ? 2e-2 : 3e-3;
}

/// 4. bfloat16 and float16 on device d (the CPU, and every other backend
/// where the row has kernels): the row's floating inputs rounded to the
/// 16-bit dtype, the op run on them on d and on the same values in float32
/// on the CPU; the 16-bit result and gradients must come back in the 16-bit
/// dtype and within its tolerance (half_tol, scaled by half_tol_scale) of the
/// float32 ones. A row opts out with a reason in half_skip.
inline void check_half(const OpCase& c, DType dt, Report& r, Device d = kCPU) {
  if (!c.half_skip.empty()) return;
  if (!d.is_cpu() && !c.cpu_only.empty()) return;  // no kernels there (check_backend holds the row to that)
  const std::string in_dt = std::string(" in ") + dtype_name(dt) + (d.is_cpu() ? "" : " on " + d.str());
  In in16 = make_inputs(c, dt, false, d);
  In in32;
  for (const Tensor& t : in16) {
    Tensor u = t.detach().cpu();
    if (is_half(u.dtype())) u = u.to(DType::Float32);
    if (t.requires_grad()) u.requires_grad_();
    in32.push_back(u);
  }
  const Tensor a = c.fn(in32);
  const Tensor b = c.fn(in16).cpu();
  if (a.dtype() == DType::Float32 && b.dtype() != dt)
    r.fail(c, "returned " + std::string(dtype_name(b.dtype())) + in_dt);
  double rtol, atol;
  half_tol(dt, rtol, atol);
  rtol *= c.half_tol_scale;
  atol *= c.half_tol_scale;
  const auto max_diff = [](const Tensor& x, const Tensor& y) { return max(abs(sub(x, y))).item<double>(); };
  if (!allclose(b.to(DType::Float32), a, rtol, atol))
    r.fail(c, "forward" + in_dt + ": max |diff| " + std::to_string(max_diff(b.to(DType::Float32), a)));
  if (!c.differentiable || !a.requires_grad()) return;
  const Tensor w16 = rand(a.shape()).to(dt), w32 = w16.to(DType::Float32);
  sum(mul(a, w32)).backward();
  sum(mul(b, w16)).backward();  // b is on the CPU: the copy's backward takes the gradient back to d
  for (size_t i = 0; i < in16.size(); ++i) {
    if (!in16[i].requires_grad()) continue;
    const Tensor g16 = in16[i].grad().defined() ? in16[i].grad().cpu() : Tensor(), g32 = in32[i].grad();
    const std::string which = "grad of input " + std::to_string(i) + in_dt;
    if (!g16.defined()) {
      r.fail(c, which + ": none");
      continue;
    }
    if (g16.dtype() != dt) r.fail(c, which + " is " + dtype_name(g16.dtype()));
    if (!allclose(g16.to(DType::Float32), g32, 2 * rtol, 2 * atol))
      r.fail(c, which + ": max |diff| " + std::to_string(max_diff(g16.to(DType::Float32), g32)));
  }
}

/// The backends besides the CPU to compare against it: "cuda" when a CUDA
/// backend (real or emulated) is linked and a device is there; otherwise
/// none, with the reason in why.
inline std::vector<Device> other_backends(std::string& why) {
  if (!cross_device_copy_kernel.has(DeviceType::CUDA)) {
    why = "no CUDA backend linked";
    return {};
  }
  try {
    (void)empty({1}, TensorOptions(Device("cuda")));
  } catch (const DeviceError& e) {
    why = std::string("CUDA backend linked, but no device: ") + e.what();
    return {};
  }
  return {Device("cuda")};
}

/// Every check on every row, each row's exceptions caught as its failures.
inline Report check_rows(const std::vector<OpCase>& rows) {
  Report r;
  std::string why;
  const std::vector<Device> devices = other_backends(why);
  if (devices.empty()) r.notes.push_back("backends: only the CPU (" + why + ")");
  for (const OpCase& c : rows) {
    try {
      check_gradients(c, r);
      check_strided(c, r);
      for (const DType dt : {DType::BFloat16, DType::Float16}) check_half(c, dt, r);
      for (const Device& d : devices) {
        for (const bool strided : {false, true}) check_backend(c, d, strided, r);
        for (const DType dt : {DType::BFloat16, DType::Float16}) check_half(c, dt, r, d);
      }
    } catch (const std::exception& e) {
      r.fail(c, std::string("threw: ") + e.what());
    }
  }
  return r;
}

}  // namespace ember::testing
