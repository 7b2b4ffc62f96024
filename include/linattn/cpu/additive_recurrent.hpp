// SPDX-License-Identifier: MIT
/// \file
/// Token-by-token recurrence of the additive family (MATH.md §1, §2): the definition, and the
/// decode path. Per token: H <- decay_t(H); H += k v^T; o = H^T q   (H = S^T, [K, V]).
#pragma once

#include <cmath>

#include "../core/family.hpp"
#include "../core/tensor_view.hpp"
#include "eigen_types.hpp"
#include "token_io.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class additive_recurrent {
 public:
  using inputs_t = typename Rule::template inputs<T>;

  additive_recurrent(index_t K, index_t V) : H_(K, V), q_(K), k_(K), v_(V), o_(V) {}

  /// Runs tokens [t0, t0 + n) of batch row b for value head hv (q/k head hq), reading the
  /// state from s_in(seq) and writing it to s_out(seq) (either may be absent or alias).
  template <class S0, class S1>
  void run(const inputs_t& in, const tensor_view<T, 4>& out, const S0& s_in, const S1& s_out,
           index_t seq, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale) {
    load_state(s_in, seq, hv, H_);
    for (index_t t = t0; t < t0 + n; ++t) {
      load_rows(in.q, b, t, hq, 1, q_, scale);
      load_rows(in.k, b, t, hq, 1, k_, A(1));
      load_rows(in.v, b, t, hv, 1, v_, A(1));
      if constexpr (Rule::decay == decay_kind::scalar) {
        H_ *= std::exp(static_cast<A>(Rule::log_gate(in, b, t, hv)));
      } else if constexpr (Rule::decay == decay_kind::vector) {
        for (index_t d = 0; d < H_.rows(); ++d) H_.row(d) *= std::exp(static_cast<A>(Rule::log_gate(in, b, t, hv, d)));
      }
      H_.noalias() += k_.transpose() * v_;
      o_.noalias() = q_ * H_;
      store_rows(out, b, t, hv, 1, o_);
    }
    store_state(s_out, seq, hv, H_);
  }

 private:
  mat<A> H_;               // [K, V]
  row_vec<A> q_, k_, v_;   // [K], [K], [V]
  row_vec<A> o_;           // [V]
};

}  // namespace linattn::cpu
