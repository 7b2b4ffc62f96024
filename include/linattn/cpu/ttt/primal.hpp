// SPDX-License-Identifier: MIT
/// \file
/// Primal form of TTT-Linear (docs/math.md#ttt-mini-batch, docs/math.md#ttt-decode): token by
/// token, matrix-vector products.
/// Token i of a mini-batch (row vectors, W = S^T):
///
///   g_i  = g_z(k_i W_0 + b_0; v_i - k_i)          gradient at the mini-batch start
///   Aw  += c_i k_i^T g_i,   a += c_i g_i           running sums (the primal's W_i - W_0)
///   o_i  = q_i + LN(q_i W_0 + b_0 - tau_i (q_i Aw + a))
///   i = b: W_0 -= tau_b Aw, b_0 -= tau_b a, sums <- 0
///
/// The recurrent form and decode_step both run this; the state persists between calls.
#pragma once

#include "../../core/tensor_view.hpp"
#include "../linalg/eigen_types.hpp"
#include "../io/token_io.hpp"
#include "layer_norm.hpp"
#include "state.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class ttt_primal {
 public:
  using inputs_t = typename Rule::template inputs<T>;

  explicit ttt_primal(index_t D) : q_(1, D), k_(1, D), y_(1, D), z_(1, D), g_(1, D), o_(1, D), rstd_(1), s1_(1), s2_(1) {}

  /// Tokens [t0, t0 + n) of batch row b, value head hv (q/k head hq), from state st.
  void run(const inputs_t& in, const tensor_view<T, 4>& out, ttt_state<A>& st, index_t b, index_t t0, index_t n,
           index_t hq, index_t hv, A scale) {
    const A eps = static_cast<A>(Rule::ln_eps);
    for (index_t t = t0; t < t0 + n; ++t) {
      load_qkv_rows(in, b, t, 1, hq, hv, scale, q_, k_, y_);
      y_ -= k_;  // target of LN: v - k
      // gradient at the mini-batch start   [1, D]
      z_.noalias() = k_ * st.W;
      z_ += st.b;
      ttt_normalise_rows<A>(z_, rstd_, eps);
      ttt_layer_norm_l2_grad<A>(z_, rstd_, y_, st.gam, st.bet, g_, s1_, s2_);
      g_ *= Rule::template step<T, A>(in, b, t, hv);
      for (index_t i = 0; i < k_.cols(); ++i) st.Aw.row(i) += k_(0, i) * g_.row(0);  // rank-1 update
      st.a += g_;
      ++st.pos;
      // read with the post-update weights of this token
      const A tau = Rule::template tau<T, A>(in, st.pos);
      z_.noalias() = q_ * st.W;
      z_ += st.b;
      g_.noalias() = q_ * st.Aw;  // g_ reused: q Aw
      g_ += st.a;
      z_ -= tau * g_;
      ttt_normalise_rows<A>(z_, rstd_, eps);
      ttt_layer_norm_residual<A>(q_, z_, st.gam, st.bet, o_);
      store_rows(out, b, t, hv, 1, o_);
      if (st.pos == in.mini_batch) st.finish_mini_batch(tau);
    }
  }

 private:
  mat<A> q_, k_, y_, z_, g_, o_;  // [1, D] each
  col_vec<A> rstd_, s1_, s2_;     // [1]
};

}  // namespace linattn::cpu
