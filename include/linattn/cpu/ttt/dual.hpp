// SPDX-License-Identifier: MIT
/// \file
/// Dual form of TTT-Linear (docs/math.md#ttt-mini-batch) over one tile of tokens of one (sequence,
/// value head). The tile's mini-batches run in order; each is a causal linear attention with values
/// -c_j g_j and an extra all-ones "bias key". Rows are tokens; W = S^T; a segment is the part of a
/// mini-batch inside the tile (m rows, starting at position p0 of its mini-batch, p0 > 0 only for a
/// mini-batch carried in through initial_cache):
///
///   Z    = K W_0 + 1 b_0   (one block product with Q W_0 + 1 b_0)     [m, D]
///   Gc   = diag(c) LNbwd(Z, V - K)                                   [m, D]
///   Zbar = Q W_0 + 1 b_0 - diag(tau) (Q Aw + 1 a)
///          - (diag(tau) tril(Q K^T + 1 1^T)) Gc                        [m, D]
///   O    = Q + LN(Zbar)
///   Aw  += K^T Gc,  a += 1^T Gc;  mini-batch complete: W_0 -= tau_b Aw, b_0 -= tau_b a
///
/// (tau = tau_{p0+1..p0+m}; Aw, a are the sums of the earlier tokens of the mini-batch.)
/// All heavy work is block products; workspaces are allocated once per worker. Whole
/// mini-batches of the sizes that ttt_mini_batch.hpp is built for run there instead.
#pragma once

#include <algorithm>

#include "../../core/tensor_view.hpp"
#include "../linalg/eigen_types.hpp"
#include "../io/token_io.hpp"
#include "layer_norm.hpp"
#include "mini_batch.hpp"
#include "state.hpp"
#include "tile.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class ttt_dual {
 public:
  using inputs_t = typename Rule::template inputs<T>;

  /// Tiles of up to `capacity` tokens, head dim D.
  ttt_dual(const inputs_t& in, index_t capacity, index_t D)
      : mb_(in.mini_batch), tile_(capacity, D), tau_(mb_), X_(2 * mb_, D), XW_(2 * mb_, D), G_(mb_, D), R_(mb_, D),
        P_(mb_, mb_), rstd_(mb_), s1_(mb_), s2_(mb_) {
    for (index_t i = 0; i < mb_; ++i) tau_(i) = Rule::template tau<T, A>(in, i + 1);
    const whole_kernel k = pick_whole(D, mb_);
    whole_ = k.run;
    ws_.resize(k.workspace);
    if (k.prepare != nullptr) k.prepare(ws_.data(), tau_.data());
  }

  /// Tokens [t0, t0 + n) of batch row b, value head hv (q/k head hq), from state st: the
  /// rows are read into the kernel's own tile (each row prefetched `lead` rows ahead: one
  /// head's rows are strided, latency-bound), computed, written back.
  void run(const inputs_t& in, const tensor_view<T, 4>& out, ttt_state<A>& st, index_t b, index_t t0, index_t n,
           index_t hq, index_t hv, A scale) {
    constexpr index_t lead = 16;
    for (index_t r = 0; r < std::min(lead, n); ++r) ttt_tile<A>::prefetch_row(in, b, t0 + r, hq, hv);
    for (index_t r = 0; r < n; ++r) {
      if (r + lead < n) ttt_tile<A>::prefetch_row(in, b, t0 + r + lead, hq, hv);
      tile_.template load_row<Rule, T>(in, r, b, t0 + r, hq, hv, scale);
    }
    compute(st, tile_, n);
    for (index_t r = 0; r < n; ++r) {
      if (r + rows_ahead < n) ttt_tile<A>::prefetch_out_row(out, b, t0 + r + rows_ahead, hv);
      tile_.store_row(out, r, b, t0 + r, hv);
    }
  }

  /// Rows [0, n) of a filled tile from state st: tile.O receives the outputs.
  void compute(ttt_state<A>& st, ttt_tile<A>& tile, index_t n) {
    for (index_t r0 = 0; r0 < n;) {
      const index_t m = std::min(mb_ - st.pos, n - r0);
      segment(st, tile, r0, m);
      r0 += m;
    }
  }

 private:
  /// Rows [r0, r0 + m) of the tile: one mini-batch, or the part of one inside the tile.
  void segment(ttt_state<A>& st, ttt_tile<A>& tile, index_t r0, index_t m) {
    const A eps = static_cast<A>(Rule::ln_eps);
    const index_t p0 = st.pos;
    if (whole_ != nullptr && p0 == 0 && m == mb_) {  // a whole mini-batch: the fixed-size kernel
      whole_({.q = &tile.Q(r0, 0), .k = &tile.K(r0, 0), .y = &tile.Y(r0, 0), .c = &tile.c(r0), .tau = tau_.data(),
              .gam = st.gam.data(), .bet = st.bet.data(), .eps = eps, .w = st.W.data(), .b = st.b.data(),
              .o = &tile.O(r0, 0), .ws = ws_.data()});
      return;
    }
    const auto Q = tile.Q.middleRows(r0, m);  // [m, D]
    const auto K = tile.K.middleRows(r0, m);  // [m, D]
    const auto tau = tau_.segment(p0, m);     // [m]
    auto G = G_.topRows(m), R = R_.topRows(m), O = tile.O.middleRows(r0, m);  // [m, D]

    // One block product for keys and queries: [K; Q] W_0 + 1 b_0.   [2m, D]
    auto X = X_.topRows(2 * m), XW = XW_.topRows(2 * m);
    X.topRows(m) = K;
    X.bottomRows(m) = Q;
    XW.noalias() = X * st.W;
    XW.rowwise() += st.b;
    auto Zk = XW.topRows(m);     // pre-norm rows of the keys (normalised in place)   [m, D]
    auto Z = XW.bottomRows(m);   // pre-norm rows of the reads   [m, D]

    // Gradients at the mini-batch start, scaled by their steps: G <- diag(c) g_z.
    auto rstd = rstd_.head(m);  // [m]
    ttt_normalise_rows<A>(Zk, rstd, eps);
    ttt_layer_norm_l2_grad<A>(Zk, rstd, tile.Y.middleRows(r0, m), st.gam, st.bet, G, s1_.head(m), s2_.head(m));
    G.array().colwise() *= tile.c.segment(r0, m).array();

    // Reads with the post-update weights of each token.
    if (p0 > 0) {  // earlier tokens of a carried mini-batch
      R.noalias() = Q * st.Aw;
      R.rowwise() += st.a;
      Z.array() -= R.array().colwise() * tau.array();
    }
    auto P = P_.topLeftCorner(m, m);  // diag(tau) tril(Q K^T + 1 1^T)   [m, m]
    P.noalias() = Q * K.transpose();
    P.array() += A(1);
    P.template triangularView<Eigen::StrictlyUpper>().setZero();
    P.array().colwise() *= tau.array();
    Z.noalias() -= P * G;
    ttt_normalise_rows<A>(Z, rstd, eps);
    ttt_layer_norm_residual<A>(Q, Z, st.gam, st.bet, O);

    // Advance the state.
    st.pos += m;
    const A tau_b = tau_(mb_ - 1);
    if (p0 == 0 && st.pos == mb_) {  // a whole mini-batch: update the weights directly
      st.W.noalias() -= (tau_b * K.transpose()) * G;
      st.b -= tau_b * G.colwise().sum();
      st.pos = 0;
      return;
    }
    st.Aw.noalias() += K.transpose() * G;
    st.a += G.colwise().sum();
    if (st.pos == mb_) st.finish_mini_batch(tau_b);
  }

  using whole_fn = void (*)(const ttt_mini_batch_args<A>&);

  struct whole_kernel {
    whole_fn run = nullptr;
    index_t workspace = 0;
    void (*prepare)(A*, const A*) = nullptr;
  };
  template <int D, int MB>
  static whole_kernel whole_kernel_for() {
    using kernel = ttt_mini_batch<A, D, MB>;
    if constexpr (kernel::supported) return {&kernel::run, kernel::workspace, &kernel::prepare};
    else return {};
  }
  /// The fixed-size kernel for head dim D and mini-batch size mb, where one is built (the
  /// official b = 16 with the usual head sizes); other sizes run segment()'s block products.
  static whole_kernel pick_whole(index_t D, index_t mb) {
    if (mb == 16 && D == 64) return whole_kernel_for<64, 16>();
    if (mb == 16 && D == 128) return whole_kernel_for<128, 16>();
    return {};
  }

  index_t mb_;              // mini-batch size b
  ttt_tile<A> tile_;        // [cap, D] rows of run()'s tiles
  col_vec<A> tau_;          // [b]      tau_1..tau_b
  mat<A> X_, XW_;           // [2b, D]  keys over queries, and times W_0 (plus b_0)
  mat<A> G_, R_;            // [b, D]   scaled gradients, carried reads
  mat<A> P_;                // [b, b]   masked scores
  col_vec<A> rstd_, s1_, s2_;  // [b]   1 / sd per row, LayerNorm-backward row sums
  whole_fn whole_ = nullptr;   // fixed-size kernel for whole mini-batches (null: none for D, b)
  col_vec<A> ws_;              // its workspace
};

}  // namespace linattn::cpu
