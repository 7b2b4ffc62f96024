// SPDX-License-Identifier: MIT
/// \file
/// The additive family (Hebbian, scalar and vector decay) over one span of tokens of one
/// (sequence, value head): the chunk of the chunkwise form, or the whole sequence in the
/// parallel form (docs/math.md#hebbian, docs/math.md#scalar-decay,
/// docs/math.md#vector-decay). Outputs are produced in row tiles of `tile` rows:
///
///   O_[tile] = (Q ⊙ exp(b)) H + P[tile, 0:r1] V[0:r1]       H = state at span start
///   H       <- decay(b_n) H + (K ⊙ exp(b_n - b))^T V        state after the span
///
/// with b the span-local inclusive cumsum of the log gates. Every exponent is <= 0: decayed
/// scores split at a pivot row e between query and key (exp(b_r - b_c) =
/// exp(b_r - b_e) exp(b_e - b_c) for c <= e < r); vector decay pivots per 64-row tile and per
/// 16-row sub-block (docs/math.md#vector-decay) and only diagonal 16x16 blocks take
/// elementwise exps.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "../../core/family.hpp"
#include "../../core/tensor_view.hpp"
#include "../linalg/eigen_types.hpp"
#include "../io/token_io.hpp"
#include "../linalg/gemm.hpp"
#include "../linalg/transpose.hpp"
#include "rule_coefficients.hpp"
#include "safe_coefficients.hpp"
#include "vector_decay_scores.hpp"

namespace linattn::cpu {

/// `A` is the accumulation/state type, `Cum` the type of the log-gate cumsum (A for chunks;
/// double for the parallel form, whose cumsum spans the whole sequence).
template <class Rule, class T, class A, class Cum>
class additive_worker {
 public:
  using inputs_t = typename Rule::template inputs<T>;
  using scalar = T;        // input and output elements
  using state_scalar = A;  // state and accumulation
  static constexpr decay_kind decay = Rule::decay;
  static constexpr index_t tile = 64;  // output rows per tile (vector_decay_scores::tile)

  additive_worker(index_t capacity, index_t K, index_t V)
      : Q_(capacity, K), K_(capacity, K), V_(capacity, V),
        P_(std::min(tile, capacity), capacity), O_(std::min(tile, capacity), V),
        vs_(decay == decay_kind::vector ? capacity : 0, decay == decay_kind::vector ? K : 0) {
    if constexpr (decay != decay_kind::vector) Kx_.resize(K, capacity);
    if constexpr (decay != decay_kind::none) Kf_.resize(capacity, K);
    if constexpr (decay == decay_kind::vector) Qs_.resize(std::min(tile, capacity), K);
    if constexpr (decay == decay_kind::scalar) {
      b_.resize(capacity, 1);
      cf_.resize(capacity);
      eb_.resize(capacity);
    }
    if constexpr (decay == decay_kind::vector) {
      b_.resize(capacity, K);
      Eb_.resize(capacity, K);
      f_.resize(K);
    }
  }

  /// Loads tokens [t0, t0 + n) of batch row `b`: q/k of head hq (q times scale), v and
  /// gates of value head hv.
  void load(const inputs_t& in, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale) {
    load_rows_only(in, b, t0, n, hq, hv, scale);
    prepare(in, b, t0, hv);
  }

  /// The two halves of load, for a worker that rewrites the rows in between (the Householder
  /// family normalises its keys): the rows of q, k and v ...
  void load_rows_only(const inputs_t& in, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale) {
    n_ = n;
    load_qkv_rows(in, b, t0, n, hq, hv, scale, Q_, K_, V_);
    if constexpr (scales_write<Rule, inputs_t>)  // the write c_t v_t k_t^T: c_t into the value rows
      for (index_t r = 0; r < n; ++r) V_.row(r) *= write_coefficient<Rule, A>(in, b, t0 + r, hv);
  }
  /// ... then the gates' cumulative sums, the decayed key copies and the scores.
  void prepare(const inputs_t& in, index_t b, index_t t0, index_t hv) {
    prepare_gates(in, b, t0, hv);
    // A span of one output tile (every chunk up to C = 64) takes its scores here, with the
    // rest of the state-free work; longer spans take them tile by tile in emit.
    if (n_ > 0 && n_ <= tile) scores(0, n_);
  }

  /// prepare, with the causal decayed Gram of the span's keys (vector decay: the Householder
  /// family's A) into G[0:n, 0:n], diagonal included. A span of one output tile scores its
  /// queries and keys in one pass, one exp row per token for both.
  void prepare(const inputs_t& in, index_t b, index_t t0, index_t hv, mat<A>& G) {
    static_assert(decay == decay_kind::vector, "prepare with a Gram: vector decay only");
    const index_t n = n_;
    prepare_gates(in, b, t0, hv);
    if (n == 0) return;
    if (n > tile) return vs_.all(K_, G.topLeftCorner(n, n), n);  // the queries' scores: tile by tile in emit
    vs_.template joint<2, 1>({&Q_, &K_}, {&vs_},
                             [&](std::size_t s, std::size_t) { return (s == 0 ? P_ : G).topLeftCorner(n, n); }, 0, n);
  }

  /// Writes the span's outputs to out(b, t0 + r, hv, :), given the state H at span start.
  /// `out` is a `tensor_view<T, 4>` `[B, T, HV, V]`, or a view that store_rows knows (the
  /// sub-step outputs of a Householder product, householder_product_io.hpp).
  template <class Out>
  void emit(const mat<A>& H, const Out& out, index_t b, index_t t0, index_t hv) {
    const bool finite_values = all_finite(V_.topRows(n_));
    for (index_t r0 = 0; r0 < n_; r0 += tile) {
      const index_t r1 = std::min(r0 + tile, n_), m = r1 - r0;
      if (n_ > tile) scores(r0, r1);  // else in load
      auto O = O_.topRows(m);  // [m, V]
      // O = (Q ⊙ exp(b)) H: the scalar gate as a row factor of the product.
      if constexpr (decay == decay_kind::vector) {
        Qs_.topRows(m) = Q_.middleRows(r0, m).cwiseProduct(Eb_.middleRows(r0, m));
        gemm(O, rows_of(Qs_.topRows(m)), H);
      } else {
        gemm(O, rows_of(Q_.middleRows(r0, m)), H, {.row_alpha = decay == decay_kind::scalar ? eb_.data() + r0 : nullptr});
      }
      if (finite_values) {
        // O += P V, P causal: row i of the tile stops at key r0 + i.
        gemm<triangle::lower_a>(O, rows_of(P_.topLeftCorner(m, r1)), V_.topRows(r1), {.beta = A(1), .diag = r0});
      } else {
        // Overflowed values (a diverging delta rule): only the causal prefix of each row, so
        // a later inf (times the masked zero) cannot turn earlier finite outputs into NaN.
        for (index_t i = 0; i < m; ++i) O.row(i).noalias() += P_.row(i).head(r0 + i + 1) * V_.topRows(r0 + i + 1);
      }
      store_rows(out, b, t0 + r0, hv, m, O);
    }
  }

  /// H <- state after the span.
  void advance(mat<A>& H) {
    const index_t n = n_;
    if (n == 0) return;
    // H <- f H + Kf^T V, Kf^T read in place (broadcasts of Kf's columns).
    if constexpr (decay == decay_kind::none) {
      gemm(H, cols_of(K_.topRows(n)), V_.topRows(n), {.beta = A(1)});
    } else if constexpr (decay == decay_kind::scalar) {
      // Kf = K ⊙ exp(b_n - b): each write decayed to the end of the span.
      const auto g = scalar_gates();
      cf_.head(n) = ex((-g.head(n)).array() + g(n - 1));
      Kf_.topRows(n).noalias() = cf_.head(n).asDiagonal() * K_.topRows(n);
      A f = std::exp(static_cast<A>(b_(n - 1, 0)));
      if (f == A(0)) {  // beta = 0 would not read H: keep 0 * (inf or NaN) = NaN as before
        H *= f;
        f = A(1);
      }
      gemm(H, cols_of(Kf_.topRows(n)), V_.topRows(n), {.beta = f});
    } else {
      // H <- diag(exp(b_n)) H + (K ⊙ exp(b_n - b))^T V: the decay in the product's store. A
      // span of one 16-block already has its keys decayed to its last row, transposed.
      f_ = ex(b_.row(n - 1));
      const gemm_params<A> x{.beta = A(1), .row_beta = f_.data()};
      if (const mat<A>* kt = vs_.keys_to_last_row()) {
        gemm(H, rows_of(kt->leftCols(n)), V_.topRows(n), x);
      } else {
        for (index_t r = 0; r < n; ++r)  // vectorised exps
          Kf_.row(r) = K_.row(r).cwiseProduct(ex(b_.row(n - 1) - b_.row(r)));
        gemm(H, cols_of(Kf_.topRows(n)), V_.topRows(n), x);
      }
    }
  }

  // Access for rules that build on this span (the Householder family replaces V by U~).
  index_t length() const { return n_; }
  const mat<A>& queries() const { return Q_; }
  const mat<A>& keys() const { return K_; }
  /// Kᵀ of the span (rules without a vector gate).   [K, cap]
  const mat<A>& keys_transposed() const { return Kx_; }
  mat<A>& keys() { return K_; }
  mat<A>& values() { return V_; }
  const mat<Cum>& cumulative_gates() const { return b_; }
  /// The scalar-gate cumsum as a contiguous vector (vectorised exps).   [cap]
  Eigen::Map<const col_vec<Cum>> scalar_gates() const { return {b_.data(), b_.rows()}; }
  /// exp of the scalar-gate cumsum, exp(b).   [cap]
  const col_vec<A>& scalar_gate_exps() const { return eb_; }
  /// exp of the per-key gate cumsum, exp(b).   [cap, K]
  const mat<A>& vector_gate_exps() const { return Eb_; }

 private:
  /// prepare's gate work: cumulative sums, their exps, the decayed key copies.
  void prepare_gates(const inputs_t& in, index_t b, index_t t0, index_t hv) {
    const index_t n = n_;
    if constexpr (decay != decay_kind::vector) transpose_into(Kx_.leftCols(n), K_.topRows(n));
    if constexpr (decay == decay_kind::scalar) {
      double run = 0;  // summed in double, rounded once per entry (a huge gate beside small ones)
      for (index_t r = 0; r < n; ++r) b_(r, 0) = static_cast<Cum>(run += floored_gate<A>(Rule::log_gate(in, b, t0 + r, hv)));
      // exp(b): one vectorised pass (a lazy exp inside asDiagonal() would be re-evaluated
      // for every packet of the product).
      eb_.head(n) = ex(scalar_gates().head(n));
    }
    if constexpr (decay == decay_kind::vector) {
      vector_gate_cumsum<Rule, A>(in, b, t0, n, hv, b_, gate_scratch_);
      Eb_.topRows(n) = ex(b_.topRows(n));  // the queries' (and a delta rule's keys') decay to the span start
      vs_.set_keys(K_, b_, n);  // keys pre-decayed to their pivots
    }
  }

  /// exp of a (non-positive) log-gate expression, evaluated in the accumulation type.
  static A ex(Cum x) { return std::exp(static_cast<A>(x)); }
  template <class E>
  static auto ex(const Eigen::DenseBase<E>& x) {
    return decay_exp<A>(x);
  }

  /// P[0:m, 0:r1] = causal decayed scores of rows [r0, r1) against keys [0, r1).
  void scores(index_t r0, index_t r1) {
    const index_t m = r1 - r0;
    auto P = P_.topLeftCorner(m, r1);
    if constexpr (decay == decay_kind::vector) {
      vs_(Q_, P, r0, r1);
    } else {
      // Row i against keys [0, r0 + i] (and a few more, up to its row block's end).
      gemm<triangle::lower_c>(P, rows_of(Q_.middleRows(r0, m)), Kx_.leftCols(r1), {.diag = r0});
      if constexpr (decay == decay_kind::scalar)
        if (r0 > 0) cf_.head(r0) = ex((-scalar_gates().head(r0)).array() + b_(r0 - 1, 0));
      for (index_t i = 0; i < m; ++i) {
        const index_t r = r0 + i, w = std::min(m, (i / 16 + 1) * 16);  // whole packets up to the diagonal
        if constexpr (decay == decay_kind::scalar) {
          // Columns before the tile: exp(b_r - b_c) = exp(b_r - b_e) exp(b_e - b_c), e = r0 - 1.
          if (r0 > 0) P.row(i).head(r0).array() *= ex(b_(r, 0) - b_(r0 - 1, 0)) * cf_.head(r0).transpose().array();
          // The tile's columns: exp(min(b_r - b_c, 0)) over whole packets (the entries right
          // of the diagonal are zeroed below).
          P.row(i).segment(r0, w).array() *=
              ex(((-scalar_gates().segment(r0, w)).array() + b_(r, 0)).min(Cum(0))).transpose().array();
        }
        P.row(i).segment(r + 1, r1 - r - 1).setZero();
      }
    }
  }

  index_t n_ = 0;
  mat<A> Q_, K_, V_;  // [cap, K], [cap, K], [cap, V]   q already scaled
  mat<A> P_, O_;      // [tile, cap], [tile, V]
  mat<A> Qs_, Kf_;    // [tile, K], [cap, K]           decayed copies
  mat<A> Kx_;         // [K, cap]                       Kᵀ (no vector decay): rows read by Q Kᵀ
  mat<Cum> b_;        // [cap, 1] or [cap, K]           span-local log-gate cumsum
  std::vector<double> gate_scratch_;  // [2K]  vector_gate_cumsum's sums and gates
  col_vec<A> cf_;     // [cap]                          scalar column / write factors
  col_vec<A> eb_;     // [cap]                          scalar exp(b)
  mat<A> Eb_;         // [cap, K]                       per-key exp(b)
  row_vec<A> f_;      // [K]                            per-dimension decay of the span
  vector_decay_scores<A, Cum> vs_;  //                  scores under per-key decays (vector decay)
};

}  // namespace linattn::cpu
