// SPDX-License-Identifier: MIT
/// \file
/// Scalar decay (RetNet, Lightning, Mamba-2, mLSTM without normaliser), docs/math.md#scalar-decay:
/// S_t = exp(g_t) S_{t-1} + v_t k_t^T. A constant per-head gate is a stride-0 view of g.
#pragma once

#include "../core/backward.hpp"
#include "../core/family.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

struct ScalarDecay {
  static constexpr const char* name = "ScalarDecay";
  using family = additive_family;
  static constexpr decay_kind decay = decay_kind::scalar;
  static constexpr bool log_gate_is_g = true;  // log_gate is in.g as stored (the CUDA backward loads it ahead)

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;  // [B, T, H, K]
    tensor_view<const T, 4> k;  // [B, T, H, K]
    tensor_view<const T, 4> v;  // [B, T, HV, V]
    coefficient_view<T, 3> g;  // [B, T, HV] log gate, <= 0
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    c.per_token("g", in.g, value_range::log_gate);
  }

  /// Log-decay of token t of batch row b for value head hv.
  template <class T>
  LINATTN_HOST_DEVICE static state_t<T> log_gate(const inputs<T>& in, index_t b, index_t t, index_t hv) {
    return in.g(b, t, hv);
  }
  /// Gradients (backward forms): outputs of the shapes of q, k, v and g.
  template <class T>
  struct gradients {
    tensor_view<T, 4> dq;  // [B, T, H, K]
    tensor_view<T, 4> dk;  // [B, T, H, K]
    tensor_view<T, 4> dv;  // [B, T, HV, V]
    coefficient_gradient_view<T, 3> dg;  // [B, T, HV] dL/d(log gate)
  };
  template <class T, class Check>
  static void check_gradients(const gradients<T>& g, Check& c) {
    c.per_token("dg", g.dg);
  }
};

}  // namespace linattn
