// SPDX-License-Identifier: MIT
/// \file
/// Longhorn, the paper's exact rule (docs/math.md#longhorn): the proximal step
///   S_t = argmin_S 1/2 ||S - S_{t-1}||_F^2 + delta_t/2 ||v_t - S k_t||^2
/// is the delta rule with beta_t = delta_t / (1 + delta_t ||k_t||^2), stable without key
/// normalisation. (The official code's diagonal approximation, docs/math.md#longhorn-official, is
/// another rule.)
#pragma once

#include "../core/backward.hpp"
#include "../core/family.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

struct Longhorn {
  static constexpr const char* name = "Longhorn";
  using family = householder_family;
  static constexpr decay_kind decay = decay_kind::none;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;      // [B, T, H, K]
    tensor_view<const T, 4> k;      // [B, T, H, K]
    tensor_view<const T, 4> v;      // [B, T, HV, V]
    coefficient_view<T, 3> delta;  // [B, T, HV] >= 0
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    c.per_token("delta", in.delta, value_range::nonnegative);
  }

  /// beta_t = delta_t / (1 + delta_t ||k_t||^2).
  template <class T, class A>
  LINATTN_HOST_DEVICE static A beta(const inputs<T>& in, index_t b, index_t t, index_t hv, A key_sqnorm) {
    const A d = static_cast<A>(in.delta(b, t, hv));
    return d / (A(1) + d * key_sqnorm);
  }
  /// Gradients (backward forms): outputs of the shapes of q, k, v and delta.
  template <class T>
  struct gradients {
    tensor_view<T, 4> dq;  // [B, T, H, K]
    tensor_view<T, 4> dk;  // [B, T, H, K]
    tensor_view<T, 4> dv;  // [B, T, HV, V]
    coefficient_gradient_view<T, 3> ddelta;  // [B, T, HV]
  };
  template <class T, class Check>
  static void check_gradients(const gradients<T>& g, Check& c) {
    c.per_token("ddelta", g.ddelta);
  }
  /// d beta / d delta = 1 / (1 + delta ||k||^2)^2 and d beta / d ||k||^2 = -beta^2: the
  /// gradient flows into k through beta.
  template <class T, class A>
  LINATTN_HOST_DEVICE static beta_partials<A> beta_derivatives(const inputs<T>& in, index_t b, index_t t, index_t hv,
                                                             A key_sqnorm) {
    const A d = static_cast<A>(in.delta(b, t, hv));
    const A den = A(1) / (A(1) + d * key_sqnorm), beta = d * den;
    return {den * den, -beta * beta};
  }
  template <class T>
  static coefficient_gradient_view<T, 3> beta_gradient(const gradients<T>& g) {
    return g.ddelta;
  }
};

}  // namespace linattn
