// SPDX-License-Identifier: MIT
/// \file
/// Delta rule (DeltaNet; LMS / Widrow-Hoff), docs/math.md#delta: one SGD step on
/// 1/2 ||S k_t - v_t||^2,
///   S_t = S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T.
/// beta in (0, 2] with L2-normalised keys (beta > 1: negative eigenvalues,
/// docs/math.md#negative-eigenvalues).
#pragma once

#include "../core/backward.hpp"
#include "../core/family.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/tensor_view.hpp"
#include "input_beta.hpp"

namespace linattn {

/// beta, beta_derivatives, beta_gradient: the step is the input beta (input_beta.hpp).
struct Delta : input_beta {
  static constexpr const char* name = "Delta";
  using family = householder_family;
  static constexpr decay_kind decay = decay_kind::none;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;     // [B, T, H, K]
    tensor_view<const T, 4> k;     // [B, T, H, K]
    tensor_view<const T, 4> v;     // [B, T, HV, V]
    coefficient_view<T, 3> beta;  // [B, T, HV] write strength
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    c.per_token("beta", in.beta, value_range::nonnegative);
  }

  /// Gradients (backward forms): outputs of the shapes of q, k, v and beta.
  template <class T>
  struct gradients {
    tensor_view<T, 4> dq;  // [B, T, H, K]
    tensor_view<T, 4> dk;  // [B, T, H, K]
    tensor_view<T, 4> dv;  // [B, T, HV, V]
    coefficient_gradient_view<T, 3> dbeta;  // [B, T, HV]
  };
  template <class T, class Check>
  static void check_gradients(const gradients<T>& g, Check& c) {
    c.per_token("dbeta", g.dbeta);
  }
};

}  // namespace linattn
