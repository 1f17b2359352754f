/// \file
/// Op descriptors: each op is declared once, as a constexpr `OpDef` beside
/// its body, and one wrapper, `op::call`, applies what the declaration says
/// before the body runs: the autocast category, the handling of 16-bit
/// inputs, and the profiler's view of the op (time and FLOPs per call).
/// The body then holds the math: checks, the kernel call, the backward.
///
/// \code
///   constexpr OpDef layer_norm_op{
///       .name = "layer_norm",
///       .autocast = Autocast::Float32,                 // PyTorch's float32 list
///       .half = Half::NativeWhere,                     // 16-bit kernels where marked,
///       .native_half = op::marked<layer_norm_kernel,   // float32 copies elsewhere
///                                 layer_norm_backward_kernel>,
///   };
///   EMBER_REGISTER_OP(layer_norm_op);
///
///   Tensor layer_norm(const Tensor& x, const Shape& s, const Tensor& w, const Tensor& b, double eps) {
///     return op::call<layer_norm_op>(layer_norm_body, x, s, w, b, eps);
///   }
/// \endcode
///
/// `op::call<D>(body, args...)` does, in order:
///  1. autocast: inside an autocast region on the first tensor argument's
///     device, an op of category LowerPrecision casts every floating tensor
///     argument (not float64) to the region's dtype, an op of category
///     Float32 casts 16-bit ones to float32, then autocast is suspended for
///     the body (its inner ops must not cast again). Ops of category None
///     pay nothing: the branch is `if constexpr`.
///  2. 16-bit inputs: an op declared `Half::Float32` (or `NativeWhere` on a
///     device whose predicate says no, or with floating tensors of mixed
///     dtypes; `InBody` ops choose per shape themselves) runs its body on
///     float32 copies (Tensor::to, which autograd
///     records) and rounds the result back once to the first 16-bit dtype
///     among the arguments, as PyTorch's CPU kernels do inside.
///  3. the profiler: when it is on, the call is timed as one op row and its
///     FLOPs (`flops`, from the argument and result shapes) are added.
///
/// A fast path, an optional kernel whose absence changes how the op is
/// computed (not whether), is declared in `fast_paths` with what runs
/// without it; the body asks `op::fast_path<D>(table, device)`, which
/// refuses a table the declaration does not name. Nothing else in an op may
/// branch on whether a kernel exists: a missing kernel is an error.
///
/// Custom ops from outside the library declare themselves the same way
/// (docs/CUSTOM_OPS.md). `op::registry()` lists every registered
/// declaration, for tests and tools that walk the ops.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ember/core/autocast.h>
#include <ember/core/device.h>
#include <ember/core/dispatch.h>
#include <ember/core/error.h>
#include <ember/core/onnx_lowering.h>
#include <ember/core/profiler.h>
#include <ember/core/tensor.h>

namespace ember {

/// An op's autocast category: PyTorch's CPU/CUDA autocast lists.
enum class Autocast : uint8_t {
  None,            ///< not on either list: inputs pass through
  LowerPrecision,  ///< GEMM-shaped: floating inputs cast to the region's 16-bit dtype
  Float32,         ///< range or accumulation needs float32: 16-bit inputs cast up
};

/// How an op treats bfloat16 / float16 tensors outside autocast.
enum class Half : uint8_t {
  Native,       ///< its kernels compute them (load as float32, round the result once)
  Float32,      ///< always on float32 copies, the result rounded back once
  NativeWhere,  ///< native where `native_half(device)` says so, float32 copies elsewhere
  InBody,       ///< the body chooses (a product form per shape); the op's declaration says how
};

/// An optional kernel that speeds an op up, and what the op does without it.
struct FastPath {
  const void* table = nullptr;  ///< the KernelTable
  const char* without = "";     ///< what runs where the table has no kernel for the device
};

/// FLOPs of one call, from the tensor arguments (in order, undefined ones
/// included) and the result.
using FlopCount = int64_t (*)(const Tensor* const* inputs, int n_inputs, const Tensor& out);

/// One op's declaration. constexpr, so the wrapper's branches on it are
/// resolved at compile time.
struct OpDef {
  const char* name = "";                  ///< for errors, the profiler and the registry
  Autocast autocast = Autocast::None;     ///< autocast category
  bool autocast_in_body = false;          ///< the body applies the category itself (op::autocast_dtype)
  Half half = Half::Native;               ///< 16-bit handling
  bool (*native_half)(Device) = nullptr;  ///< for Half::NativeWhere
  std::array<FastPath, 2> fast_paths{};   ///< optional kernels (unused slots have table == nullptr)
  FlopCount flops = nullptr;              ///< for the profiler; nullptr: not counted
  lowering::Lowering onnx = nullptr;      ///< how ONNX export writes it (core/onnx_lowering.h); nullptr: refused
};

namespace op {

/// Whether every table in Tables marks its kernel for device as taking
/// 16-bit tensors (EMBER_REGISTER_HALF_KERNEL): the usual native_half.
template <auto&... Tables>
bool marked(Device device);

/// Every registered declaration (EMBER_REGISTER_OP), in registration order.
const std::vector<const OpDef*>& registry();
/// Adds d to the registry; throws ValueError when another op has d's name.
void register_op(const OpDef& d);
/// The registered declaration named name, or nullptr.
const OpDef* find(const char* name);

/// The dtype D's autocast category asks for t, when t's device is in an
/// autocast region; nullopt otherwise. What an op with autocast_in_body calls.
template <const OpDef& D>
std::optional<DType> autocast_dtype(const Tensor& t) {
  static_assert(D.autocast != Autocast::None, "autocast_dtype: the op has no autocast category");
  if (!ember::detail::t_autocast_any || !t.defined() || !autocast_enabled(t.device().type)) return std::nullopt;
  return D.autocast == Autocast::LowerPrecision ? autocast_dtype(t.device().type) : DType::Float32;
}

/// Whether D's fast path `table` has a kernel for device. Throws
/// std::logic_error when D does not declare table as a fast path.
template <const OpDef& D, class Table>
bool fast_path(const Table& table, Device device) {
  for (const FastPath& p : D.fast_paths)
    if (p.table == &table) return table.has(device.type);
  throw std::logic_error(std::string(D.name) + ": kernel table '" + table.name() +
                         "' is asked for as a fast path but the op's declaration does not list it");
}

namespace detail {

template <class T>
inline constexpr bool is_tensor_v = std::is_same_v<std::decay_t<T>, Tensor>;

// The first defined tensor among the arguments (the device autocast asks about).
template <class... A>
const Tensor* first_tensor(const A&... args) {
  const Tensor* found = nullptr;
  auto look = [&](const auto& a) {
    if constexpr (is_tensor_v<decltype(a)>)
      if (!found && a.defined()) found = &a;
  };
  (look(args), ...);
  return found;
}

// A tensor argument mapped by f; every other argument forwarded as it is.
template <class F, class A>
decltype(auto) map_tensor(F& f, A&& a) {
  if constexpr (is_tensor_v<A>)
    return f(static_cast<const Tensor&>(a));
  else
    return std::forward<A>(a);
}

// The first 16-bit dtype among the tensor arguments, and whether their
// floating dtypes differ.
struct HalfScan {
  std::optional<DType> half;
  bool mixed = false;
};
template <class... A>
HalfScan scan_half(const A&... args) {
  HalfScan s;
  std::optional<DType> floating;
  auto look = [&](const auto& a) {
    if constexpr (is_tensor_v<decltype(a)>) {
      if (!a.defined() || !a.is_floating_point()) return;
      if (!s.half && is_half(a.dtype())) s.half = a.dtype();
      if (floating && *floating != a.dtype()) s.mixed = true;
      floating = a.dtype();
    }
  };
  (look(args), ...);
  return s;
}

}  // namespace detail

/// A float32-computed result rounded back to the op's 16-bit dtype: a
/// tensor, or the floating tensors of a pair / tuple (indices stay int64).
/// A body returning another type declares `round_half_result(T, DType)` in
/// T's namespace (found by argument-dependent lookup).
inline Tensor round_half_result(Tensor r, DType dt) { return r.is_floating_point() ? r.to(dt) : r; }
template <class... T>
std::tuple<T...> round_half_result(std::tuple<T...> r, DType dt) {
  return std::apply([&](auto&... e) { return std::tuple<T...>(round_half_result(std::move(e), dt)...); }, r);
}
template <class A, class B>
std::pair<A, B> round_half_result(std::pair<A, B> r, DType dt) {
  return {round_half_result(std::move(r.first), dt), round_half_result(std::move(r.second), dt)};
}

namespace detail {

// Step 3: the body, timed with its FLOPs when the profiler is on.
template <const OpDef& D, class Body, class... A>
decltype(auto) run(Body& body, A&&... args) {
  if (__builtin_expect(!profiler::enabled(), 1)) return body(std::forward<A>(args)...);
  const auto t0 = std::chrono::steady_clock::now();
  auto out = body(args...);
  int64_t flops = 0;
  // A function pointer's comparison with nullptr is not a constant
  // expression under every compiler mode (GCC's -fsanitize=undefined), so
  // these tests of the declaration's pointers are run-time ones.
  if constexpr (std::is_same_v<std::decay_t<decltype(out)>, Tensor>) {
    if (D.flops != nullptr) {
      std::vector<const Tensor*> ins;
      auto add = [&](const auto& a) {
        if constexpr (is_tensor_v<decltype(a)>) ins.push_back(&a);
      };
      (add(args), ...);
      flops = D.flops(ins.data(), static_cast<int>(ins.size()), out);
    }
  }
  profiler::record_op(D.name, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), flops);
  return out;
}

// Step 2: 16-bit arguments on float32 copies where the declaration says so.
template <const OpDef& D, class Body, class... A>
decltype(auto) run_half(Body& body, A&&... args) {
  if constexpr (D.half != Half::Native && D.half != Half::InBody) {
    const HalfScan s = scan_half(args...);
    if (s.half) {
      bool copies = true;
      if constexpr (D.half == Half::NativeWhere)  // without a predicate: copies everywhere
        copies = s.mixed || D.native_half == nullptr || !D.native_half(first_tensor(args...)->device());
      if (copies) {
        auto up = [](const Tensor& t) { return t.defined() && is_half(t.dtype()) ? t.to(DType::Float32) : t; };
        return round_half_result(run<D>(body, map_tensor(up, std::forward<A>(args))...), *s.half);
      }
    }
  }
  return run<D>(body, std::forward<A>(args)...);
}

}  // namespace detail

namespace detail {
template <const OpDef& D, class Body, class... A>
auto dispatch(Body& body, A&&... args);

// Under an exporter's tracer: the call recorded with its results, its body
// run unrecorded (core/onnx_lowering.h).
template <const OpDef& D, class Body, class... A>
auto traced(Body& body, A&&... args) {
  lowering::Call c;
  c.op = &D;
  c.args.reserve(sizeof...(A));
  (c.args.push_back(lowering::to_arg(args)), ...);
  lowering::Tracer* tracer = lowering::detail::t_tracer;
  auto out = [&] {
    lowering::TraceScope off(nullptr);
    return dispatch<D>(body, std::forward<A>(args)...);
  }();
  using lowering::add_outputs;  // and, by argument-dependent lookup, a result type's own
  add_outputs(c.outputs, out);
  tracer->record(std::move(c));
  return out;
}
}  // namespace detail

/// Runs body(args...) as op D: autocast, 16-bit handling, profiler (the
/// file comment); under an exporter, records the call. body is usually the
/// op's implementation function.
template <const OpDef& D, class Body, class... A>
auto call(Body&& body, A&&... args) {
  // A run-time test of the pointer (see detail::run).
  if (__builtin_expect(lowering::detail::t_tracer != nullptr, 0) && D.onnx != &lowering::decompose)
    return detail::traced<D>(body, std::forward<A>(args)...);
  return detail::dispatch<D>(body, std::forward<A>(args)...);
}

/// op::call for a body that reads its arguments from its lambda's captures
/// instead of its parameters (`[&](const auto&...) { ... a, b ... }`: the
/// views and pointwise ops, whose bodies overload on argument kinds). Such a
/// body sees the caller's tensors, not the ones dispatch hands it, which is
/// right only while the declaration transforms none: no autocast cast before
/// the body and 16-bit inputs passed as they are. Checked here at compile
/// time, so a category added to such a declaration cannot be silently lost.
template <const OpDef& D, class Body, class... A>
auto call_captured(Body&& body, A&&... args) {
  static_assert(D.autocast == Autocast::None || D.autocast_in_body,
                "op::call_captured: the declaration has an autocast category its captured body would not see");
  static_assert(D.half == Half::Native || D.half == Half::InBody,
                "op::call_captured: the declaration copies 16-bit inputs its captured body would not see");
  return call<D>(body, std::forward<A>(args)...);
}

template <const OpDef& D, class Body, class... A>
auto detail::dispatch(Body& body, A&&... args) {
  if constexpr (D.autocast != Autocast::None && !D.autocast_in_body) {
    if (__builtin_expect(ember::detail::t_autocast_any, 0)) {
      const Tensor* t = detail::first_tensor(args...);
      if (t && autocast_enabled(t->device().type)) {
        DType dt = D.autocast == Autocast::LowerPrecision ? autocast_dtype(t->device().type) : DType::Float32;
        auto cast = [dt](const Tensor& x) { return autocast_cast(x, dt); };
        AutocastSuspend off;
        return detail::run_half<D>(body, detail::map_tensor(cast, std::forward<A>(args))...);
      }
    }
  }
  return detail::run_half<D>(body, std::forward<A>(args)...);
}

template <auto&... Tables>
bool marked(Device device) {
  return (takes_half_kernel(&Tables, device.type) && ...);
}

/// Registers a declaration from a static initialiser.
struct OpRegistrar {
  /// register_op(d).
  explicit OpRegistrar(const OpDef& d) { register_op(d); }
};

}  // namespace op
}  // namespace ember

/// Adds an OpDef to op::registry() at static initialisation.
#define EMBER_REGISTER_OP(def) static ::ember::op::OpRegistrar EMBER_CONCAT(ember_op_registrar_, __COUNTER__)(def)
