// SPDX-License-Identifier: MIT
/// \file
/// The diagonal-plus-low-rank family (RWKV-7, docs/math.md#rwkv-7-chunkwise) over one span of
/// tokens of one (sequence, value head): a chunk of the chunkwise form or a whole sequence in
/// the parallel form. With H = S^T ([K, V]) the recurrence is
///   r_t = a_t^T H_{t-1},   H_t = diag(exp(g_t)) H_{t-1} + b_t r_t^T + k_t v_t^T,   o_t = H_t^T q_t.
/// Per span, with c the span-local inclusive log-gate cumsum ([n, K]) and H0 the state at the
/// span start, every read r_t is a linear function of H0, the values and the earlier reads:
///
///   Â   = rows a_t ⊙ exp(c_{t-1})                  a decayed from the span start     [n, K]
///   L_x = [t, j] = sum_d a_t,d x_j,d exp(c_{t-1,d} - c_j,d), j < t   (x = b or k)    [n, n]
///   (I - L_b) R = Â H0 + L_k V                      forward substitution              [n, V]
///   O   = (Q ⊙ exp(c)) H0 + P_k V + P_b R           P_x the causal scores of q vs x    [n, V]
///   H  <- diag(exp(c_n)) H0 + (K ⊙ exp(c_n - c))^T V + (B ⊙ exp(c_n - c))^T R
///
/// L_x's row t is the score of a_t against x under the cumsum of row t - 1, so it is computed as
/// the inclusive causal score of the rows a_{t+1} (stored one row up) against x: every score
/// goes through vector_decay_scores (a chunk's four blocks in one `joint` pass) and every
/// exponent is <= 0. The substitution's intermediates
/// are the recurrence's own reads, so its accuracy is the recurrence's (no explicit inverse).
#pragma once

#include <algorithm>
#include <vector>

#include "../../core/config.hpp"
#include "../../core/tensor_view.hpp"
#include "../io/token_io.hpp"
#include "../linalg/eigen_types.hpp"
#include "../linalg/gemm.hpp"
#include "../linalg/unit_lower_solve.hpp"
#include "vector_decay_scores.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A, class Cum>
class dplr_worker {
 public:
  using inputs_t = typename Rule::template inputs<T>;
  using scalar = T;        // input and output elements
  using state_scalar = A;  // state and accumulation
  static constexpr index_t tile = vector_decay_scores<A, Cum>::tile;  // output rows per tile
  /// `load` does the chunk-local work (scores, L_b, L_k V) that chunks may do in parallel.
  static constexpr bool chunk_local_load = true;

  dplr_worker(index_t capacity, index_t K, index_t V)
      : Q_(capacity, K), K_(capacity, K), Bw_(capacity, K), Ad_(capacity, K), An_(capacity, K), Qd_(capacity, K),
        KB_(2 * capacity, K), c_(capacity, K), f_(K), e_(K), VR_(2 * capacity, V), Y_(capacity, V),
        M_(capacity, capacity), Pk_(std::min(tile, capacity), capacity),
        Pb_(std::min(tile, capacity), capacity), Lk_(std::min(tile, capacity), capacity),
        Lb_(std::min(tile, capacity), capacity), O_(std::min(tile, capacity), V), sk_(capacity, K), sb_(capacity, K) {}

  void load(const inputs_t& in, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale) {
    n_ = n;
    load_qkv_rows(in, b, t0, n, hq, hv, scale, Q_, K_, VR_);  // v: VR_'s first n rows
    load_rows(in.b, b, t0, hv, n, Bw_, A(1));
    load_rows(in.a, b, t0, hv, n, Ad_, A(1));
    if (n == 0) return;
    vector_gate_cumsum<Rule, A>(in, b, t0, n, hv, c_, gate_scratch_);
    vector_decay_scores<A, Cum>::template set_keys<2>({&sk_, &sb_}, {&K_, &Bw_}, c_, n);
    const index_t m = n - 1;  // reads of tokens 1..n-1 depend on the span's earlier tokens

    // a_{t+1} in row t (it reads the state of token t, under c_t); then Â = a ⊙ exp(c_{t-1}).
    An_.topRows(m) = Ad_.middleRows(1, m);
    An_.row(m).setZero();  // no token after the span
    for (index_t r = 0; r < n; ++r) {  // row by row (vectorised exps), each exp row serving two operands
      e_ = decay_exp<A>(c_.row(r));
      Qd_.row(r) = Q_.row(r).cwiseProduct(e_);
      if (r < m) Ad_.row(r + 1) = Ad_.row(r + 1).cwiseProduct(e_);
      e_ = decay_exp<A>(c_.row(n - 1) - c_.row(r));
      KB_.row(r) = K_.row(r).cwiseProduct(e_);
      KB_.row(n + r) = Bw_.row(r).cwiseProduct(e_);
    }
    f_ = decay_exp<A>(c_.row(n - 1));

    Y_.row(0).setZero();
    if (n <= tile) {
      // One tile (every chunk up to C = 64): the four score blocks in one pass, sharing the
      // diagonal blocks' exps; M's strictly lower part is -L_b (row 0 has none), Y = L_k V.
      sk_.template joint<2, 2>({&Q_, &An_}, {&sk_, &sb_}, [&](std::size_t s, std::size_t j) {
        return (s == 0 ? (j == 0 ? Pk_ : Pb_) : (j == 0 ? Lk_ : Lb_)).topLeftCorner(n, n);
      }, 0, n);
      M_.block(1, 0, m, m) = -Lb_.topLeftCorner(m, m);
      if (m > 0) gemm<triangle::lower_a>(Y_.middleRows(1, m), rows_of(Lk_.topLeftCorner(m, m)), VR_.topRows(m));
      return;
    }
    // Longer spans (the parallel form): L_b whole, L_k V and the output scores tile by tile.
    // M's strictly lower part: -L_b (unit_lower_solve inverts I + M). Row 0 has none.
    auto Lb = M_.block(1, 0, m, m);
    sb_.all(An_, Lb, m);
    Lb = -Lb;
    // Y = L_k V, tile by tile of L_k's rows 1..n-1.   [n, V]
    for (index_t r0 = 0; r0 < m; r0 += tile) {
      const index_t r1 = std::min(r0 + tile, m), w = r1 - r0;
      sk_(An_, Pk_.topLeftCorner(w, r1), r0, r1);
      gemm<triangle::lower_a>(Y_.middleRows(r0 + 1, w), rows_of(Pk_.topLeftCorner(w, r1)), VR_.topRows(r1),
                              {.diag = r0});
    }
  }

  /// Outputs of the span given the state H at its start; R = the span's reads.
  template <class Out>
  void emit(const mat<A>& H, const Out& out, index_t b, index_t t0, index_t hv) {
    const index_t n = n_;
    if (n == 0) return;
    auto R = VR_.middleRows(n, n);  // [n, V]
    R = Y_.topRows(n);
    gemm(R, rows_of(Ad_.topRows(n)), H, {.beta = A(1)});  // Â H0 + L_k V
    unit_lower_solve(M_, R, n);                          // (I - L_b)^{-1}
    for (index_t r0 = 0; r0 < n; r0 += tile) {
      const index_t r1 = std::min(r0 + tile, n), m = r1 - r0;
      if (n > tile) output_scores(r0, r1);  // else in load
      auto O = O_.topRows(m);  // [m, V]
      gemm(O, rows_of(Qd_.middleRows(r0, m)), H);
      gemm<triangle::lower_a>(O, rows_of(Pk_.topLeftCorner(m, r1)), VR_.topRows(r1), {.beta = A(1), .diag = r0});
      gemm<triangle::lower_a>(O, rows_of(Pb_.topLeftCorner(m, r1)), VR_.middleRows(n, r1), {.beta = A(1), .diag = r0});
      store_rows(out, b, t0 + r0, hv, m, O);
    }
  }

  /// H <- state after the span (uses R from emit).
  void advance(mat<A>& H) {
    const index_t n = n_;
    if (n == 0) return;
    // H <- diag(exp(c_n)) H + [K ⊙ exp(c_n - c); B ⊙ exp(c_n - c)]^T [V; R]: one product of
    // depth 2n, the decay in its store.
    gemm(H, cols_of(KB_.topRows(2 * n)), VR_.topRows(2 * n), {.beta = A(1), .row_beta = f_.data()});
  }

 private:
  /// Pk_, Pb_ [0:r1-r0, 0:r1] = causal scores of the query rows [r0, r1) against k and b.
  void output_scores(index_t r0, index_t r1) {
    sk_(Q_, Pk_.topLeftCorner(r1 - r0, r1), r0, r1);
    sb_(Q_, Pb_.topLeftCorner(r1 - r0, r1), r0, r1);
  }

  index_t n_ = 0;
  mat<A> Q_, K_, Bw_;  // [cap, K]  q (scaled), k, the low-rank write vector b
  mat<A> Ad_;          // [cap, K]  a, then Â = a ⊙ exp(c_{t-1})
  mat<A> An_;          // [cap, K]  a_{t+1} in row t
  mat<A> Qd_;          // [cap, K]  q ⊙ exp(c)
  mat<A> KB_;          // [2 cap, K]  k ⊙ exp(c_n - c) in rows [0, n), b ⊙ exp(c_n - c) in rows [n, 2n)
  mat<Cum> c_;         // [cap, K]  span-local inclusive log-gate cumsum
  std::vector<double> gate_scratch_;  // [2K]  vector_gate_cumsum's sums and gates
  row_vec<A> f_;       // [K]       exp(c_n): the span's decay
  row_vec<A> e_;       // [K]       one row's decay exps
  mat<A> VR_;          // [2 cap, V]  v in rows [0, n), the reads r in rows [n, 2n)
  mat<A> Y_;           // [cap, V]  L_k V
  mat<A> M_;           // [cap, cap] strictly lower part: -L_b
  mat<A> Pk_, Pb_;     // [tile, cap] scores of q against k and b; Pk_ also L_k's tiles (long spans)
  mat<A> Lk_, Lb_;     // [tile, cap] L_k and L_b one row up (spans of one tile)
  mat<A> O_;           // [tile, V] output rows
  vector_decay_scores<A, Cum> sk_, sb_;  // scores against k and against b
};

}  // namespace linattn::cpu
