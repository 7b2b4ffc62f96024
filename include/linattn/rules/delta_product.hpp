// SPDX-License-Identifier: MIT
/// \file
/// DeltaProduct (Siems et al. 2025), docs/math.md#deltaproduct: n_h Householder steps per token,
///   S <- exp(g_t) S  (GatedDeltaProduct only),
///   S <- S (I - beta_tj k_tj k_tj^T) + beta_tj v_tj k_tj^T   for j = 0..n_h-1,   o_t = S q_t,
/// a state transition exp(g_t) prod_j (I - beta_tj k_tj k_tj^T) of rank <= n_h beside the
/// identity. n_h is the extent of k's third axis (any n_h >= 1); n_h = 1 is Delta / GatedDelta.
/// The forms run the delta rule's kernels on the interleaved sub-steps
/// (cpu/linear/householder_product.hpp); options::chunk_size counts sub-steps.
#pragma once

#include "../core/family.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

namespace detail {
/// What both product rules read per sub-step: beta_tj (the key's squared norm is unused).
struct householder_steps {
  template <class In, class A>
  LINATTN_HOST_DEVICE static A beta(const In& in, index_t b, index_t t, index_t j, index_t hv, A /*key_sqnorm*/) {
    return static_cast<A>(in.beta(b, t, j, hv));
  }
};
}  // namespace detail

struct DeltaProduct : detail::householder_steps {
  static constexpr const char* name = "DeltaProduct";
  using family = householder_product_family;
  static constexpr decay_kind decay = decay_kind::none;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;     // [B, T, H, K]
    tensor_view<const T, 5> k;     // [B, T, n_h, H, K]
    tensor_view<const T, 5> v;     // [B, T, n_h, HV, V]
    coefficient_view<T, 4> beta;  // [B, T, n_h, HV] write strength of each step
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    c.per_step("beta", in.beta, value_range::nonnegative);
  }
};

struct GatedDeltaProduct : detail::householder_steps {
  static constexpr const char* name = "GatedDeltaProduct";
  using family = householder_product_family;
  static constexpr decay_kind decay = decay_kind::scalar;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;     // [B, T, H, K]
    tensor_view<const T, 5> k;     // [B, T, n_h, H, K]
    tensor_view<const T, 5> v;     // [B, T, n_h, HV, V]
    coefficient_view<T, 3> g;     // [B, T, HV] log gate of the token (once, before its steps), <= 0
    coefficient_view<T, 4> beta;  // [B, T, n_h, HV] write strength of each step
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    c.per_token("g", in.g, value_range::log_gate);
    c.per_step("beta", in.beta, value_range::nonnegative);
  }

  template <class T>
  LINATTN_HOST_DEVICE static state_t<T> log_gate(const inputs<T>& in, index_t b, index_t t, index_t hv) {
    return in.g(b, t, hv);
  }
};

}  // namespace linattn
