// SPDX-License-Identifier: MIT
/// \file
/// Token-by-token recurrence of the Householder family (MATH.md §3, §4): the definition, and
/// the decode path. Per token (H = S^T, [K, V]):
///   H *= exp(g_t);  u = beta_t (v_t - H^T k_t);  H += k_t u^T;  o_t = H^T q_t.
#pragma once

#include <cmath>

#include "../core/family.hpp"
#include "../core/tensor_view.hpp"
#include "eigen_types.hpp"
#include "token_io.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class householder_recurrent {
 public:
  using inputs_t = typename Rule::template inputs<T>;

  householder_recurrent(index_t K, index_t V) : H_(K, V), q_(K), k_(K), v_(V), u_(V), o_(V) {}

  template <class S0, class S1>
  void run(const inputs_t& in, const tensor_view<T, 4>& out, const S0& s_in, const S1& s_out,
           index_t seq, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale) {
    load_state(s_in, seq, hv, H_);
    for (index_t t = t0; t < t0 + n; ++t) {
      load_rows(in.q, b, t, hq, 1, q_, scale);
      load_rows(in.k, b, t, hq, 1, k_, A(1));
      load_rows(in.v, b, t, hv, 1, v_, A(1));
      if constexpr (Rule::decay == decay_kind::scalar) H_ *= std::exp(static_cast<A>(Rule::log_gate(in, b, t, hv)));
      const A beta = Rule::beta(in, b, t, hv, k_.squaredNorm());
      u_.noalias() = v_ - k_ * H_;  // v - S k   [V]
      u_ *= beta;
      H_.noalias() += k_.transpose() * u_;
      o_.noalias() = q_ * H_;
      store_rows(out, b, t, hv, 1, o_);
    }
    store_state(s_out, seq, hv, H_);
  }

 private:
  mat<A> H_;                    // [K, V]
  row_vec<A> q_, k_, v_, u_;    // [K], [K], [V], [V]
  row_vec<A> o_;                // [V]
};

}  // namespace linattn::cpu
