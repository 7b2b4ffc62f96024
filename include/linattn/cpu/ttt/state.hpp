// SPDX-License-Identifier: MIT
/// \file
/// The state of one (sequence, value head) of TTT-Linear while a form runs
/// (docs/math.md#ttt-decode): start weights of the current mini-batch, its step-weighted gradient
/// sums and position, and the per-head LayerNorm parameters. Loaded from and stored to the caller's
/// views (layouts: rules/ttt_linear.hpp).
#pragma once

#include <cmath>

#include "../../core/tensor_view.hpp"
#include "../linalg/eigen_types.hpp"
#include "../io/token_io.hpp"

namespace linattn::cpu {

template <class A>
struct ttt_state {
  mat<A> W;        // [D, D]  W_0 = S_0^T (row = input dim)
  row_vec<A> b;    // [D]     b_0
  mat<A> Aw;       // [D, D]  sum_j c_j k_j g_j^T over the unfinished mini-batch
  row_vec<A> a;    // [D]     sum_j c_j g_j
  index_t pos = 0;  // tokens of the unfinished mini-batch, 0..mini_batch-1
  row_vec<A> gam, bet;  // [D] inner LayerNorm weight and bias of this head
  row_vec<A> tail;      // [D] the cache's row D + 1 after its position entry, carried through

  explicit ttt_state(index_t D) : W(D, D), b(D), Aw(D, D), a(D), gam(D), bet(D), tail(D) {}

  /// Loads head hv from entry n of the state views: the sequence, or its pool slot
  /// (options::state_indices). Missing views or n < 0 (a padding slot): zero weights and bias,
  /// empty mini-batch.
  template <class Inputs, class S>
  void load(const Inputs& in, const tensor_view<S, 4>& w_view, index_t n, index_t hv) {
    const index_t D = W.rows();
    load_state(w_view, n, hv, W);
    for (index_t j = 0; j < D; ++j) {
      b(j) = in.initial_bias.given() && n >= 0 ? static_cast<A>(in.initial_bias(n, hv, j)) : A(0);
      gam(j) = static_cast<A>(in.ln_weight(hv, j));
      bet(j) = static_cast<A>(in.ln_bias(hv, j));
    }
    const auto& c = in.initial_cache;
    tail.setZero();
    if (!c.given() || n < 0) {
      Aw.setZero();
      a.setZero();
      pos = 0;
      return;
    }
    for (index_t j = 1; j < D; ++j) tail(j) = static_cast<A>(c(n, hv, D + 1, j));
    load_state(c, n, hv, Aw);  // rows 0..D-1
    for (index_t j = 0; j < D; ++j) a(j) = static_cast<A>(c(n, hv, D, j));
    pos = static_cast<index_t>(c(n, hv, D + 1, 0));  // validated: an integer in [0, mini_batch)
  }

  /// Ends the mini-batch after `pos` tokens: W_0 <- W_0 - tau Aw, b_0 <- b_0 - tau a.
  void finish_mini_batch(A tau) {
    W -= tau * Aw;
    b -= tau * a;
    Aw.setZero();
    a.setZero();
    pos = 0;
  }

  /// Stores head hv into entry n of the state views (n < 0: nothing). Without a cache view an
  /// unfinished mini-batch is folded into the weights first (tau_pos = tau of its last token);
  /// this changes the state.
  template <class Inputs, class S>
  void store(const Inputs& in, const tensor_view<S, 4>& w_view, index_t n, index_t hv, A tau_pos) {
    if (n < 0) return;
    const index_t D = W.rows();
    const auto& c = in.final_cache;
    if (!c.given() && pos > 0) finish_mini_batch(tau_pos);
    store_state(w_view, n, hv, W);
    if (in.final_bias.given())
      for (index_t j = 0; j < D; ++j) in.final_bias(n, hv, j) = static_cast<S>(b(j));
    if (!c.given()) return;
    store_state(c, n, hv, Aw);  // rows 0..D-1
    for (index_t j = 0; j < D; ++j) {
      c(n, hv, D, j) = static_cast<S>(a(j));
      c(n, hv, D + 1, j) = static_cast<S>(tail(j));  // carried through unchanged
    }
    c(n, hv, D + 1, 0) = static_cast<S>(pos);
  }
};

}  // namespace linattn::cpu
