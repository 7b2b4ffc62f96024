// SPDX-License-Identifier: MIT
/// \file
/// RWKV-7 "Goose" (Peng et al. 2025), docs/math.md#rwkv-7: the generalised delta rule with a
/// diagonal-plus-low-rank transition and free vectors a_t, b_t,
///   S_t = S_{t-1} (diag(exp(g_t)) + a_t b_t^T) + v_t k_t^T,   o_t = S_t (scale q_t),
/// S [V, K]; the state view holds S^T [K, V]. The read of a_t sees S_{t-1} before its decay;
/// the output reads S_t after the token's write. RWKV-7 itself has a = -kappa^, b = kappa^ ⊙ alpha
/// (kappa^ a unit key, alpha in (0, 1)); any a, b are accepted. The q scale defaults to 1
/// (RWKV's receptance is not scaled). No backward pass.
#pragma once

#include "../core/family.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

struct RWKV7 {
  static constexpr const char* name = "RWKV7";
  using family = dplr_family;
  static constexpr decay_kind decay = decay_kind::vector;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;  // [B, T, H, K] receptance r
    tensor_view<const T, 4> k;  // [B, T, H, K]
    tensor_view<const T, 4> v;  // [B, T, HV, V]
    coefficient_view<T, 4> g;  // [B, T, HV, K] log decay per key dimension, <= 0 (w = exp(g))
    tensor_view<const T, 4> a;  // [B, T, HV, K] read vector of the low-rank part
    tensor_view<const T, 4> b;  // [B, T, HV, K] write vector of the low-rank part
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    c.per_key("g", in.g, value_range::log_gate);
    c.per_key("a", in.a, value_range::any);
    c.per_key("b", in.b, value_range::any);
  }

  /// RWKV-7 applies no scale to its receptance.
  static constexpr double default_scale(index_t /*K*/) { return 1.0; }

  /// Log-decay of key dimension d at token t of batch row b for value head hv.
  template <class T>
  LINATTN_HOST_DEVICE static state_t<T> log_gate(const inputs<T>& in, index_t b, index_t t, index_t hv, index_t d) {
    return in.g(b, t, hv, d);
  }
};

}  // namespace linattn
