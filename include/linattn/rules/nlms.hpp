// SPDX-License-Identifier: MIT
/// \file
/// NLMS (normalised LMS; Kaczmarz / projection rule), docs/math.md#nlms (the delta -> infinity
/// limit of Longhorn, docs/math.md#longhorn): the delta rule with step
/// beta_t = 1 / (||k_t||^2 + eps_k),
///   S_t = S_{t-1} + (v_t - S_{t-1} k_t) k_t^T / (||k_t||^2 + eps_k),
/// so S_t k_t = v_t up to eps_k. The denominator eps_k > 0 keeps the step finite for a zero key
/// (docs/math.md#numerical-regimes). Needs no key normalisation: the non-unit eigenvalue
/// of the transition is eps_k / (||k||^2 + eps_k) in (0, 1].
#pragma once

#include <cmath>
#include <string>

#include "../core/backward.hpp"
#include "../core/family.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

struct NLMS {
  static constexpr const char* name = "NLMS";
  using family = householder_family;
  static constexpr decay_kind decay = decay_kind::none;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;  // [B, T, H, K]
    tensor_view<const T, 4> k;  // [B, T, H, K]
    tensor_view<const T, 4> v;  // [B, T, HV, V]
    double eps_k = 1e-6;        // > 0: regulariser of the step's denominator
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    if (!(std::isfinite(in.eps_k) && in.eps_k > 0))
      c.fail("eps_k", "is " + std::to_string(in.eps_k) + ", expected a finite number > 0");
  }

  /// beta_t = 1 / (||k_t||^2 + eps_k).
  template <class T, class A>
  LINATTN_HOST_DEVICE static A beta(const inputs<T>& in, index_t, index_t, index_t, A key_sqnorm) {
    return A(1) / (key_sqnorm + static_cast<A>(in.eps_k));
  }
  /// Gradients (backward forms): outputs of the shapes of q, k, v (eps_k is a number: no gradient).
  template <class T>
  struct gradients {
    tensor_view<T, 4> dq;  // [B, T, H, K]
    tensor_view<T, 4> dk;  // [B, T, H, K]
    tensor_view<T, 4> dv;  // [B, T, HV, V]
  };
  /// beta = 1 / (||k||^2 + eps_k): d beta / d ||k||^2 = -beta^2 (the gradient flows into k).
  template <class T, class A>
  LINATTN_HOST_DEVICE static beta_partials<A> beta_derivatives(const inputs<T>& in, index_t, index_t, index_t, A key_sqnorm) {
    const A beta = A(1) / (key_sqnorm + static_cast<A>(in.eps_k));
    return {A(0), -beta * beta};
  }
  /// beta has no input view.
  template <class T>
  static coefficient_gradient_view<T, 3> beta_gradient(const gradients<T>&) {
    return {};
  }
};

}  // namespace linattn
