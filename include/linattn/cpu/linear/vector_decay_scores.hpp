// SPDX-License-Identifier: MIT
/// \file
/// Causal scores of a span under per-key decays (docs/math.md#vector-decay): for source rows
/// Src (queries, or keys for a Gram) against one set of keys K, both under the span-local
/// inclusive log-gate cumsum b,
///
///   P[r, c] = sum_d Src_rd K_cd exp(b_rd - b_cd)   for c <= r,   0 for c > r,
///
/// with every exponent <= 0: rows and keys meet at a pivot row e between them (c <= e < r),
/// exp(b_r - b_c) = exp(b_r - b_e) exp(b_e - b_c), per 64-row tile and per 16-row sub-block.
/// A diagonal 16 x 16 block is a product too, through its own last row e (rows times
/// exp(b_r - b_e) >= 1, keys times exp(b_e - b_c) <= 1), where its decay span b_first - b_e is
/// at most `bounded_span` in every key dimension (so neither factor leaves fp32's range); a
/// block with a longer span (strong gates, resets) takes its exps entry by entry, each
/// exponent <= 0. Also the per-key gate cumsum itself
/// (summed in double, rounded once per entry). Used by the additive span (vector decay: one
/// source, one key set) and the diagonal-plus-low-rank span (one instance per key set; `joint`
/// scores q and a against k and b in one pass, one exp row per diagonal-block pair).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "../../core/config.hpp"
#include "../io/token_io.hpp"
#include "../linalg/eigen_types.hpp"
#include "../linalg/gemm.hpp"
#include "../linalg/transpose.hpp"
#include "rule_coefficients.hpp"
#include "safe_coefficients.hpp"

namespace linattn::cpu {

/// exp of a (non-positive) log-gate expression, evaluated in A. Eigen 3.4's cast has no packet
/// access even to the same type, so a cast would make the whole expression scalar (one std::exp
/// call per entry): it is skipped when the scalar already is A. (So is rowwise(): its Replicate
/// has no packet access either; the callers decay row by row.)
template <class A, class E>
auto decay_exp(const Eigen::DenseBase<E>& x) {
  if constexpr (std::is_same_v<typename E::Scalar, A>) return x.derived().array().exp().matrix();
  else return x.derived().template cast<A>().array().exp().matrix();
}

/// cum[r, d] = sum of the floored log gates of key dimension d over tokens [t0, t0 + r],
/// r in [0, n), summed in double and rounded once per entry.   cum: [cap, K]
/// `scratch` is the caller's buffer (2 K doubles once grown: the sums and one token's gates),
/// so that a chunk allocates nothing. A gate tensor `g` [B, T, HV, K] with contiguous rows is
/// prefetched rows_ahead tokens on, as the q, k, v rows are (a new page per row).
template <class Rule, class A, class In, class Cum>
void vector_gate_cumsum(const In& in, index_t b, index_t t0, index_t n, index_t hv, mat<Cum>& cum,
                        std::vector<double>& scratch) {
  const auto K = static_cast<std::size_t>(cum.cols());
  scratch.assign(2 * K, 0.0);
  double* const run = scratch.data();
  double* const gates = run + K;
  for (index_t r = 0; r < n; ++r) {
    if constexpr (requires { &in.g(b, t0, hv, 0); })  // gates stored as a plain view
      prefetch_row(in.g, b, t0 + r + rows_ahead, hv, false);
    vector_log_gates<Rule>(in, b, t0 + r, hv, index_t(K), gates);
    for (std::size_t d = 0; d < K; ++d) cum(r, index_t(d)) = static_cast<Cum>(run[d] += floored_gate<A>(gates[d]));
  }
}

template <class A, class Cum>
class vector_decay_scores {
 public:
  static constexpr index_t tile = 64;  // outer pivot block
  static constexpr index_t sub = 16;   // inner pivot block
  static constexpr double bounded_span = 40.0;  // exp(40) ~ 2e17: a diagonal block's factors stay far inside fp32
  static constexpr std::size_t max_sources = 2;  // sources of one `joint` pass

  vector_decay_scores(index_t capacity, index_t K)
      : Kt_(K, capacity), Ks_(K, capacity), Kf_(K, capacity), Kr_(capacity, K), Ss_(std::min(tile, capacity), K),
        Sd_(index_t(max_sources) * sub, K), f_(K), e_(K), t_(max_sources, K) {}

  /// Takes keys rows [0, n) of K under the cumsum b (both kept by reference until the next call):
  /// the keys pre-decayed to the last row of their 16-block and (n > tile: only rows past the
  /// first tile read them) their 64-block, stored transposed (the right operand of the library's gemm).
  void set_keys(const mat<A>& K, const mat<Cum>& b, index_t n) { set_keys<1>({this}, {&K}, b, n); }

  /// set_keys for J key sets under the same cumsum: each row's decay exps are taken once for all.
  template <std::size_t J>
  static void set_keys(const std::array<vector_decay_scores*, J>& sets, const std::array<const mat<A>*, J>& keys,
                       const mat<Cum>& b, index_t n) {
    for (std::size_t j = 0; j < J; ++j) sets[j]->K_ = keys[j], sets[j]->b_ = &b, sets[j]->b_rows_ = n;
    row_vec<A>& e = sets[0]->e_;
    for (const index_t bs : {tile, sub}) {  // rows first (exps vectorised along them), then transposed
      if (bs == tile && n <= tile) continue;
      for (index_t i = 0; i < n; ++i) {
        e = decay_exp<A>(b.row(std::min(i / bs * bs + bs - 1, n - 1)) - b.row(i));
        for (std::size_t j = 0; j < J; ++j) sets[j]->Kr_.row(i) = keys[j]->row(i).cwiseProduct(e);
      }
      for (vector_decay_scores* k : sets) transpose_into((bs == tile ? k->Kt_ : k->Ks_).leftCols(n), k->Kr_.topRows(n));
    }
  }

  /// P[0:r1-r0, 0:r1] = causal scores of rows [r0, r1) of Src against keys [0, r1); r0 a
  /// multiple of `tile`.
  template <class Dst>
  void operator()(const mat<A>& Src, Dst&& P, index_t r0, index_t r1) {
    joint<1, 1>({&Src}, {this}, [&](std::size_t, std::size_t) { return P.block(0, 0, P.rows(), P.cols()); }, r0, r1);
  }

  /// The scores of S sources against J key sets (this one among them; all under the same
  /// cumsum) in one pass: dst(s, j) gives the block P of source s against key set j, as for
  /// operator(). A diagonal block is one product per pair where its span is bounded; otherwise
  /// its entrywise exps exp(b_i - b_c) are taken once for all S J pairs.
  template <std::size_t S, std::size_t J, class DstOf>
  void joint(const std::array<const mat<A>*, S>& src, const std::array<vector_decay_scores*, J>& keys, DstOf&& dst,
             index_t r0, index_t r1) {
    static_assert(S <= max_sources, "vector_decay_scores::joint: at most max_sources sources");
    const mat<Cum>& b = *b_;
    if (r0 > 0)
      for (std::size_t s = 0; s < S; ++s)
        for (std::size_t j = 0; j < J; ++j) {
          auto P = dst(s, j);
          keys[j]->pivot_block(*src[s], P, r0, r1, 0, r0, keys[j]->Kt_, tile);
        }
    // Rows of each 16-block against the tile's earlier 16-blocks, through the pivot e = a0 - 1:
    // each source's rows and each key set's keys decayed to e once, then one product per pair.
    for (index_t a0 = r0 + sub; a0 < r1; a0 += sub) {
      const index_t e = a0 - 1, ma = std::min(a0 + sub, r1) - a0;
      for (vector_decay_scores* k : keys) k->keys_to_pivot(e, r0, a0, k->Ks_, sub);
      sources_to_pivot(src, a0, ma, e);
      for (std::size_t s = 0; s < S; ++s)
        for (std::size_t j = 0; j < J; ++j)
          gemm(dst(s, j).block(a0 - r0, r0, ma, a0 - r0), rows_of(Sd_.middleRows(index_t(s) * sub, ma)),
               keys[j]->Kf_.middleCols(r0, a0 - r0));
    }
    for (index_t a0 = r0; a0 < r1; a0 += sub) {
      const index_t a1 = std::min(a0 + sub, r1);
      if (diagonal_product(src, keys, dst, a0, a1, r0, r1)) continue;
      if constexpr (S == 1 && J == 1) {  // one pair: one fused expression per entry
        auto P = dst(0, 0);
        const mat<A>& K = *keys[0]->K_;
        for (index_t i = a0; i < a1; ++i) {  // diagonal block: exponents <= 0
          for (index_t c = a0; c <= i; ++c)
            P(i - r0, c) = src[0]->row(i).cwiseProduct(K.row(c)).cwiseProduct(decay_exp<A>(b.row(i) - b.row(c))).sum();
          P.row(i - r0).segment(i + 1, r1 - i - 1).setZero();
        }
        continue;
      }
      for (index_t i = a0; i < a1; ++i) {  // diagonal block: elementwise, exponents <= 0
        for (index_t c = a0; c <= i; ++c) {
          e_ = decay_exp<A>(b.row(i) - b.row(c));
          for (std::size_t s = 0; s < S; ++s) {
            t_.row(index_t(s)) = src[s]->row(i).cwiseProduct(e_);
            for (std::size_t j = 0; j < J; ++j) dst(s, j)(i - r0, c) = t_.row(index_t(s)).dot(keys[j]->K_->row(c));
          }
        }
        for (std::size_t s = 0; s < S; ++s)
          for (std::size_t j = 0; j < J; ++j) dst(s, j).row(i - r0).segment(i + 1, r1 - i - 1).setZero();
      }
    }
  }

  /// The keys decayed to the last row of the span, transposed ([K, cap], the first n columns
  /// read), where set_keys made them on the way (a span of at most one 16-block: its pivot is
  /// that row); else nullptr.
  const mat<A>* keys_to_last_row() const { return b_rows_ <= sub ? &Ks_ : nullptr; }

  /// G[0:n, 0:n] = the causal scores of Src rows [0, n) against the keys, tile by tile.
  template <class Dst>
  void all(const mat<A>& Src, Dst&& G, index_t n) {
    for (index_t r0 = 0; r0 < n; r0 += tile) {
      const index_t r1 = std::min(r0 + tile, n);
      (*this)(Src, G.block(r0, 0, r1 - r0, r1), r0, r1);
    }
  }

 private:
  /// The diagonal block [a0, a1) of every (source, key set) pair as a product through its last
  /// row e = a1 - 1, with the upper triangle and the rest of each row up to r1 zeroed; false
  /// (nothing written) where the block's span exceeds bounded_span in some key dimension (or
  /// is not finite), or e is not the keys' 16-block pivot (Ks_).
  template <std::size_t S, std::size_t J, class DstOf>
  bool diagonal_product(const std::array<const mat<A>*, S>& src, const std::array<vector_decay_scores*, J>& keys,
                        DstOf& dst, index_t a0, index_t a1, index_t r0, index_t r1) {
    const mat<Cum>& b = *b_;
    const index_t e = a1 - 1, m = a1 - a0;
    for (const vector_decay_scores* k : keys)
      if (e != std::min(a0 / sub * sub + sub - 1, k->b_rows_ - 1)) return false;
    const auto span = (b.row(a0) - b.row(e)).template cast<double>().array();
    if (!(span <= bounded_span).all()) return false;  // NaN compares false
    sources_to_pivot(src, a0, m, e);
    for (std::size_t s = 0; s < S; ++s)
      for (std::size_t j = 0; j < J; ++j) {
        auto P = dst(s, j);
        gemm(P.block(a0 - r0, a0, m, m), rows_of(Sd_.middleRows(index_t(s) * sub, m)), keys[j]->Ks_.middleCols(a0, m));
        for (index_t i = a0; i < a1; ++i) P.row(i - r0).segment(i + 1, r1 - i - 1).setZero();
      }
    return true;
  }

  /// Rows [a0, a1) of Src against keys [c0, a0) through the pivot e = a0 - 1, into rows
  /// [a0 - r0, a1 - r0) of P: Src rows decayed to e, keys (pre-decayed to their block's last row
  /// in Kpre [K, cap], block size bs) decayed on to e.
  template <class Dst>
  void pivot_block(const mat<A>& Src, Dst& P, index_t a0, index_t a1, index_t c0, index_t r0, const mat<A>& Kpre,
                   index_t bs) {
    const index_t e = a0 - 1, ma = a1 - a0;
    rows_to_pivot(Src, Ss_.topRows(ma), a0, e);
    keys_to_pivot(e, c0, a0, Kpre, bs);
    gemm(P.block(a0 - r0, c0, ma, a0 - c0), rows_of(Ss_.topRows(ma)), Kf_.middleCols(c0, a0 - c0));
  }

  /// out's rows = Src rows [a0, a0 + out.rows()) times exp(b_r - b_e) (e < a0: exponents <= 0).
  template <class Out>
  void rows_to_pivot(const mat<A>& Src, Out&& out, index_t a0, index_t e) const {
    const mat<Cum>& b = *b_;
    for (index_t i = 0; i < out.rows(); ++i)
      out.row(i) = Src.row(a0 + i).cwiseProduct(decay_exp<A>(b.row(a0 + i) - b.row(e)));
  }

  /// Sd_ rows [s sub, s sub + m) = rows [a0, a0 + m) of source s times exp(b_r - b_e), one exp
  /// row per token for all sources.
  template <std::size_t S>
  void sources_to_pivot(const std::array<const mat<A>*, S>& src, index_t a0, index_t m, index_t e) {
    const mat<Cum>& b = *b_;
    for (index_t i = 0; i < m; ++i) {
      e_ = decay_exp<A>(b.row(a0 + i) - b.row(e));
      for (std::size_t s = 0; s < S; ++s) Sd_.row(index_t(s) * sub + i) = src[s]->row(a0 + i).cwiseProduct(e_);
    }
  }

  /// Kf_ columns [c0, a0) = the keys pre-decayed to the last row p of their bs-block (Kpre
  /// [K, cap]) decayed on to the pivot e >= p: times exp(b_e - b_p) per key dimension.
  void keys_to_pivot(index_t e, index_t c0, index_t a0, const mat<A>& Kpre, index_t bs) {
    const mat<Cum>& b = *b_;
    for (index_t j = c0; j < a0; j += bs) {
      const index_t p = j + bs - 1;  // blocks before a0 are full
      f_ = decay_exp<A>(b.row(e) - b.row(p));
      Kf_.middleCols(j, bs).noalias() = f_.asDiagonal() * Kpre.middleCols(j, bs);
    }
  }

  const mat<A>* K_ = nullptr;  // [cap, K]  the keys
  const mat<Cum>* b_ = nullptr;  // [cap, K]  their inclusive log-gate cumsum
  index_t b_rows_ = 0;           // the keys' count n
  mat<A> Kt_, Ks_;  // [K, cap]  keys decayed to their 64/16-block pivot, transposed
  mat<A> Kf_;       // [K, cap]  keys decayed on to the current pivot, transposed
  mat<A> Kr_;       // [cap, K]  set_keys' rows before they are transposed
  mat<A> Ss_;       // [tile, K] source rows decayed to the current pivot
  mat<A> Sd_;       // [max_sources * sub, K] per source, its 16 rows decayed to the current pivot (a 16-block
                    //   pivot, or their own diagonal block's last row)
  row_vec<A> f_;    // [K]       per-dimension pivot factor
  row_vec<A> e_;    // [K]       one exp row: a key row's pivot factor (set_keys), exp(b_i - b_c) of a diagonal pair
  mat<A> t_;        // [max_sources, K] source rows times e_
};

}  // namespace linattn::cpu
