// SPDX-License-Identifier: MIT
/// \file
/// Gated delta rule (Gated DeltaNet), docs/math.md#gated-delta:
///   S_t = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T.
#pragma once

#include "../core/family.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

struct GatedDelta {
  static constexpr const char* name = "GatedDelta";
  using family = householder_family;
  static constexpr decay_kind decay = decay_kind::scalar;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;     // [B, T, H, K]
    tensor_view<const T, 4> k;     // [B, T, H, K]
    tensor_view<const T, 4> v;     // [B, T, HV, V]
    tensor_view<const T, 3> g;     // [B, T, HV] log gate, <= 0
    tensor_view<const T, 3> beta;  // [B, T, HV] write strength
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    c.per_token("g", in.g, value_range::log_gate);
    c.per_token("beta", in.beta, value_range::nonnegative);
  }

  template <class T>
  LINATTN_HOST_DEVICE static T log_gate(const inputs<T>& in, index_t b, index_t t, index_t hv) {
    return in.g(b, t, hv);
  }

  template <class T, class A>
  LINATTN_HOST_DEVICE static A beta(const inputs<T>& in, index_t b, index_t t, index_t hv, A /*key_sqnorm*/) {
    return static_cast<A>(in.beta(b, t, hv));
  }
};

}  // namespace linattn
