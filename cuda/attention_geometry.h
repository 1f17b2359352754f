/// \file
/// What the fused attention kernels' launches fill alike (cuda/causal_attention.cu's
/// float32 and float64 kernels, cuda/attention_tc.cuh's tensor-core ones):
/// a geometry's sizes, strides and dropout from q, k, v and the op's
/// parameters, and the backward's pointers to dO, the row statistics and
/// the wanted input gradients. Each kernel family has its own Geom and
/// Grads structs (different scalar types and extra fields); these fill the
/// fields they share by name.
#pragma once

#include <cstdint>
#include <type_traits>

#include <ember/core/tensor.h>
#include <ember/ops/dropout.h>

namespace ember::cuda {

/// g's N, H, L, S, the element strides of q (N, L, H D), k and v (N, S, H D)
/// along their first two dims, and scale, dropout, spec, threshold and
/// keep_scale from pr (detail::CausalAttentionParams or
/// detail::FusedAttentionParams), the scalars as Scalar.
template <class Scalar, class G, class Params>
void fill_geometry(G& g, const Tensor& q, const Tensor& k, const Tensor& v, const Params& pr) {
  g.N = q.size(0);
  g.H = pr.heads;
  g.L = q.size(1);
  g.S = k.size(1);
  g.qs0 = q.stride(0);
  g.qs1 = q.stride(1);
  g.ks0 = k.stride(0);
  g.ks1 = k.stride(1);
  g.vs0 = v.stride(0);
  g.vs1 = v.stride(1);
  g.scale = static_cast<Scalar>(pr.scale);
  g.dropout = pr.p > 0;
  g.spec = pr.spec;
  g.threshold = g.dropout ? dropout_threshold(pr.p) : 0;
  g.keep_scale = static_cast<Scalar>(1.0 / (1.0 - pr.p));
}

/// gd's dO pointer and strides (gr), its lse and delta pointers (of the
/// type gd declares them), and dq, dk, dv as Elem pointers with their first
/// two strides, null and 0 for an undefined (unwanted) gradient.
template <class Elem, class Grads>
void fill_grads(Grads& gd, const Tensor& gr, const Tensor& lse, const Tensor& delta, Tensor& dq, Tensor& dk,
                Tensor& dv) {
  using Stat = std::remove_cv_t<std::remove_pointer_t<decltype(gd.lse)>>;
  gd.g = static_cast<const Elem*>(gr.data_ptr());
  gd.gs0 = gr.stride(0);
  gd.gs1 = gr.stride(1);
  gd.lse = static_cast<const Stat*>(lse.data_ptr());
  gd.delta = static_cast<const Stat*>(delta.data_ptr());
  auto ptr = [](Tensor& x) { return x.defined() ? static_cast<Elem*>(x.data_ptr()) : nullptr; };
  auto st = [](const Tensor& x, int i) { return x.defined() ? x.stride(i) : int64_t(0); };
  gd.dq = ptr(dq);
  gd.dk = ptr(dk);
  gd.dv = ptr(dv);
  gd.dqs0 = st(dq, 0);
  gd.dqs1 = st(dq, 1);
  gd.dks0 = st(dk, 0);
  gd.dks1 = st(dk, 1);
  gd.dvs0 = st(dv, 0);
  gd.dvs1 = st(dv, 1);
}

}  // namespace ember::cuda
