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
#include "../core/tensor_view.hpp"

namespace linattn {

struct Delta {
  static constexpr const char* name = "Delta";
  using family = householder_family;
  static constexpr decay_kind decay = decay_kind::none;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;     // [B, T, H, K]
    tensor_view<const T, 4> k;     // [B, T, H, K]
    tensor_view<const T, 4> v;     // [B, T, HV, V]
    tensor_view<const T, 3> beta;  // [B, T, HV] write strength
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    c.per_token("beta", in.beta, value_range::nonnegative);
  }

  /// Step size of token t (the key's squared norm is unused here).
  template <class T, class A>
  LINATTN_HOST_DEVICE static A beta(const inputs<T>& in, index_t b, index_t t, index_t hv, A /*key_sqnorm*/) {
    return static_cast<A>(in.beta(b, t, hv));
  }
  /// Gradients (backward forms): outputs of the shapes of q, k, v and beta.
  template <class T>
  struct gradients {
    tensor_view<T, 4> dq;  // [B, T, H, K]
    tensor_view<T, 4> dk;  // [B, T, H, K]
    tensor_view<T, 4> dv;  // [B, T, HV, V]
    tensor_view<T, 3> dbeta;  // [B, T, HV]
  };
  template <class T, class Check>
  static void check_gradients(const gradients<T>& g, Check& c) {
    c.per_token("dbeta", g.dbeta);
  }
  /// d beta / d beta = 1; beta does not depend on the key.
  template <class T, class A>
  LINATTN_HOST_DEVICE static beta_partials<A> beta_derivatives(const inputs<T>&, index_t, index_t, index_t, A) {
    return {A(1), A(0)};
  }
  /// Where dL/d beta goes.
  template <class T>
  static tensor_view<T, 3> beta_gradient(const gradients<T>& g) {
    return g.dbeta;
  }
};

}  // namespace linattn
