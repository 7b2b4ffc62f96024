// SPDX-License-Identifier: MIT
/// \file
/// Per-key vector decay (GLA, RWKV-6 without bonus, HGRN-2), docs/math.md#vector-decay:
/// S_t = S_{t-1} diag(exp(g_t)) + v_t k_t^T.
#pragma once

#include "../core/backward.hpp"
#include "../core/family.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

struct VectorDecay {
  static constexpr const char* name = "VectorDecay";
  using family = additive_family;
  static constexpr decay_kind decay = decay_kind::vector;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;  // [B, T, H, K]
    tensor_view<const T, 4> k;  // [B, T, H, K]
    tensor_view<const T, 4> v;  // [B, T, HV, V]
    coefficient_view<T, 4> g;  // [B, T, HV, K] log gate per key dimension, <= 0
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    c.per_key("g", in.g, value_range::log_gate);
  }

  /// Log-decay of key dimension d at token t of batch row b for value head hv.
  template <class T>
  LINATTN_HOST_DEVICE static state_t<T> log_gate(const inputs<T>& in, index_t b, index_t t, index_t hv,
                                        index_t d) {
    return in.g(b, t, hv, d);
  }
  /// Gradients (backward forms): outputs of the shapes of q, k, v and g.
  template <class T>
  struct gradients {
    tensor_view<T, 4> dq;  // [B, T, H, K]
    tensor_view<T, 4> dk;  // [B, T, H, K]
    tensor_view<T, 4> dv;  // [B, T, HV, V]
    coefficient_gradient_view<T, 4> dg;  // [B, T, HV, K] dL/d(log gate)
  };
  template <class T, class Check>
  static void check_gradients(const gradients<T>& g, Check& c) {
    c.per_key("dg", g.dg);
  }
};

}  // namespace linattn
