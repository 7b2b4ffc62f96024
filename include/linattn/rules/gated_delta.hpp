// SPDX-License-Identifier: MIT
/// \file
/// Gated delta rule (Gated DeltaNet), docs/math.md#gated-delta:
///   S_t = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T.
#pragma once

#include "../core/backward.hpp"
#include "../core/family.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/tensor_view.hpp"
#include "input_beta.hpp"

namespace linattn {

/// beta, beta_derivatives, beta_gradient: the step is the input beta (input_beta.hpp).
struct GatedDelta : input_beta {
  static constexpr const char* name = "GatedDelta";
  using family = householder_family;
  static constexpr decay_kind decay = decay_kind::scalar;
  static constexpr bool log_gate_is_g = true;  // log_gate is in.g as stored (the CUDA backward loads it ahead)

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;     // [B, T, H, K]
    tensor_view<const T, 4> k;     // [B, T, H, K]
    tensor_view<const T, 4> v;     // [B, T, HV, V]
    coefficient_view<T, 3> g;     // [B, T, HV] log gate, <= 0
    coefficient_view<T, 3> beta;  // [B, T, HV] write strength
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    c.per_token("g", in.g, value_range::log_gate);
    c.per_token("beta", in.beta, value_range::nonnegative);
  }

  template <class T>
  LINATTN_HOST_DEVICE static state_t<T> log_gate(const inputs<T>& in, index_t b, index_t t, index_t hv) {
    return in.g(b, t, hv);
  }

  /// Gradients (backward forms): outputs of the shapes of q, k, v, g and beta.
  template <class T>
  struct gradients {
    tensor_view<T, 4> dq;  // [B, T, H, K]
    tensor_view<T, 4> dk;  // [B, T, H, K]
    tensor_view<T, 4> dv;  // [B, T, HV, V]
    coefficient_gradient_view<T, 3> dg;     // [B, T, HV] dL/d(log gate)
    coefficient_gradient_view<T, 3> dbeta;  // [B, T, HV]
  };
  template <class T, class Check>
  static void check_gradients(const gradients<T>& g, Check& c) {
    c.per_token("dg", g.dg);
    c.per_token("dbeta", g.dbeta);
  }
};

}  // namespace linattn
