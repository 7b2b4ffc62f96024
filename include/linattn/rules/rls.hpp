// SPDX-License-Identifier: MIT
/// \file
/// Recursive least squares with a forgetting factor, docs/math.md#rls: S_t is the exact
/// minimiser of
///   sum_{i<=t} w_{t,i} ||v_i - S k_i||^2 + delta w_{t,0} ||S||_F^2,   w_{t,i} = prod_{j=i+1..t} gamma_j,
/// the regression end of the spectrum (Delta/NLMS take one step, RLS solves). Per token, with
/// P = (sum_i w_{t,i} k_i k_i^T + delta w_{t,0} I)^{-1}:
///   Pk = P k;  g = Pk / (gamma + k^T Pk);  S += (v - S k) g^T;  P = (P - g Pk^T) / gamma;  o = S q.
///
/// Forgetting: `g` holds log gamma_t <= 0 per token and value head (a constant lambda is a
/// stride-0 view); leave it unset for unweighted RLS (gamma = 1, the seed paper's eq. 11).
///
/// State layout (`[N, HV, K, V + K]`, fp32 for float inputs): row i of a head's `[K, V + K]`
/// block is row i of S^T (columns 0..V-1, as for every other rule) followed by row i of P
/// (columns V..V+K-1; P is symmetric and kept so). Without options::initial_state a sequence
/// starts from S = 0, P = I / delta.
#pragma once

#include <cmath>
#include <string>

#include "../core/family.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

struct RLS {
  static constexpr const char* name = "RLS";
  using family = rls_family;
  static constexpr decay_kind decay = decay_kind::scalar;
  static constexpr const char* state_shape = "[N, HV, K, V + K] (S^T beside P)";

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;  // [B, T, H, K]
    tensor_view<const T, 4> k;  // [B, T, H, K]
    tensor_view<const T, 4> v;  // [B, T, HV, V]
    coefficient_view<T, 3> g{};  // [B, T, HV] log forgetting factor <= 0; unset: gamma = 1
    double delta = 1.0;         // > 0: ridge of the initial P = I / delta (no initial_state)
  };

  /// Columns of the state: S^T ([K, V]) then P ([K, K]).
  static constexpr index_t state_columns(index_t K, index_t V) { return V + K; }

  /// Fills a `[N, HV, K, V + K]` state with the default start S = 0, P = I / delta (e.g. before
  /// the first decode_step).
  template <class R>
  static void init_state(const tensor_view<R, 4>& state, double delta = 1.0) {
    const index_t V = state.extent(3) - state.extent(2);
    for (index_t n = 0; n < state.extent(0); ++n)
      for (index_t h = 0; h < state.extent(1); ++h)
        for (index_t i = 0; i < state.extent(2); ++i)
          for (index_t j = 0; j < state.extent(3); ++j) state(n, h, i, j) = static_cast<R>(j - V == i ? 1.0 / delta : 0.0);
  }

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    if (in.g.given()) c.per_token("g", in.g, value_range::log_gate);
    if (!(std::isfinite(in.delta) && in.delta > 0))
      c.fail("delta", "is " + std::to_string(in.delta) + ", expected a finite number > 0");
  }

  /// log gamma_t (0 when g is unset).
  template <class T>
  static state_t<T> log_gate(const inputs<T>& in, index_t b, index_t t, index_t hv) {
    return in.g.given() ? state_t<T>(in.g(b, t, hv)) : state_t<T>(0);
  }
};

}  // namespace linattn
