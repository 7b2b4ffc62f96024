// SPDX-License-Identifier: MIT
/// \file
/// Token-by-token recurrence of the matrix-state rules (docs/math.md#hebbian through
/// docs/math.md#nlms): the definition of every rule, and the decode path. Per token, with
/// H = S^T ([K, V]):
///
///   H <- decay_t(H)                  none, exp(g_t) H, or diag(exp(g_t)) H
///   u  = v_t                         additive family (Hebbian write)
///   u  = beta_t (v_t - H^T k_t)      Householder family (erase, then write)
///   H += k_t u^T;   o_t = H^T q_t
#pragma once

#include <cmath>
#include <type_traits>

#include "../../core/family.hpp"
#include "../../core/tensor_view.hpp"
#include "../linalg/eigen_types.hpp"
#include "../io/token_io.hpp"
#include "safe_coefficients.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class token_worker {
 public:
  using inputs_t = typename Rule::template inputs<T>;
  using scalar = T;        // input and output elements
  using state_scalar = A;  // state and accumulation
  static constexpr bool corrects = std::is_same_v<typename Rule::family, householder_family>;

  token_worker(index_t K, index_t V) : H_(K, V), q_(K), k_(K), u_(V), o_(V) {}

  /// Runs tokens [t0, t0 + n) of batch row b for value head hv (q/k head hq), reading the
  /// state from s_in(seq) and writing it to s_out(seq) (either may be absent or alias).
  template <class S0, class S1>
  void run(const inputs_t& in, const tensor_view<T, 4>& out, const S0& s_in, const S1& s_out,
           index_t seq, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale) {
    load_state(s_in, seq, hv, H_);
    for (index_t t = t0; t < t0 + n; ++t) {
      load_rows(in.q, b, t, hq, 1, q_, scale);
      load_rows(in.k, b, t, hq, 1, k_, A(1));
      load_rows(in.v, b, t, hv, 1, u_, A(1));
      if constexpr (Rule::decay == decay_kind::scalar) {
        H_ *= std::exp(static_cast<A>(Rule::log_gate(in, b, t, hv)));
      } else if constexpr (Rule::decay == decay_kind::vector) {
        for (index_t d = 0; d < H_.rows(); ++d) H_.row(d) *= std::exp(static_cast<A>(Rule::log_gate(in, b, t, hv, d)));
      }
      if constexpr (corrects) {
        // Unit key, value over |k|, beta |k|^2: the same update for any key norm.
        const A beta = normalise_key<A>(k_, u_, [&](double sq) { return Rule::beta(in, b, t, hv, sq); });
        u_.noalias() -= k_ * H_;  // v - S k   [V]
        u_ *= beta;
      }
      H_.noalias() += k_.transpose() * u_;
      o_.noalias() = q_ * H_;
      store_rows(out, b, t, hv, 1, o_);
    }
    store_state(s_out, seq, hv, H_);
  }

 private:
  mat<A> H_;                // [K, V]
  row_vec<A> q_, k_, u_;    // [K], [K], [V]  (u: the value, then what is written)
  row_vec<A> o_;            // [V]
};

}  // namespace linattn::cpu
