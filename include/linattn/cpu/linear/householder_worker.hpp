// SPDX-License-Identifier: MIT
/// \file
/// The Householder (delta-rule) family over one span of tokens of one (sequence, value head): a
/// chunk of the chunkwise form or a whole sequence in the parallel form, through the WY/UT
/// representation (docs/math.md#wy-representation, docs/math.md#gated-delta-chunkwise). Per span,
/// with b the local log-gate cumsum and Gam_ri = exp(b_r - b_i) (i <= r; Gam = 1 without a gate):
///
///   A  = stril(diag(beta) (K K^T ⊙ Gam))            (i)   gates enter the UT transform
///   T  = (I + A)^{-1} diag(beta)                     blocked forward substitution
///   U~ = T (V - diag(exp(b)) K H)                    (ii)  keys decayed to the span start;
///                                                    H = state at span start  [K, V]
///
/// U~ is the U - W H of docs/math.md#wy-representation with W = T diag(exp(b)) K and U = T V,
/// with T applied after the state product: one [n, n] x [n, V] product instead of two (W and
/// U), 2 n K FLOPs per token fewer (why the CUDA backend groups it otherwise:
/// docs/math.md#wy-cpu-vs-cuda). After that the span is an additive (decay) span with values
/// U~: outputs diag(exp(b)) Q H + (Q K^T ⊙ Gam) U~ and state
/// exp(b_n) H + (diag(exp(b_n - b)) K)^T U~ ((iii)-(v)), computed by `additive_worker`. Every
/// exponent is <= 0.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "../../core/config.hpp"
#include "../../core/family.hpp"
#include "../../core/tensor_view.hpp"
#include "../io/token_io.hpp"
#include "additive_worker.hpp"
#include "../linalg/eigen_types.hpp"
#include "../linalg/gemm.hpp"
#include "../linalg/unit_lower_solve.hpp"
#include "safe_coefficients.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A, class Cum>
class householder_worker {
 public:
  using inputs_t = typename Rule::template inputs<T>;
  using scalar = T;        // input and output elements
  using state_scalar = A;  // state and accumulation
  static constexpr bool gated = Rule::decay == decay_kind::scalar;
  static constexpr bool vector_gated = Rule::decay == decay_kind::vector;  // KDA

  /// Largest ratio ||T||_inf max|X| / max|T X| (a bound on the largest partial sum of T X over
  /// the result) accepted from the explicit T: it loses about log2 of this many mantissa bits
  /// (8 of float's 24, 17 of double's 53).
  static constexpr A max_cancellation = sizeof(A) == 4 ? A(256) : A(131072);
  /// `load` does the chunk-local work (Gram, T, scores) that chunks may do in parallel.
  static constexpr bool chunk_local_load = true;

  /// Spans up to max_chunk_size tokens (chunks) form T explicitly; longer ones (the parallel
  /// form over a whole sequence) solve (I + A) U~ = diag(beta) (V - exp(b) K H) directly,
  /// which costs O(n^2 V) instead of O(n^3).
  householder_worker(index_t capacity, index_t K, index_t V)
      : core_(capacity, K, V), beta_(capacity), M_(capacity, capacity), nd_(capacity), X_(capacity, V) {
    if (capacity <= max_chunk_size) T_.resize(capacity, capacity);
    if constexpr (!gated) nd_.setConstant(A(-1));
    if constexpr (vector_gated) Kd_.resize(capacity, K);
  }

  void load(const inputs_t& in, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale) {
    core_.load_rows_only(in, b, t0, n, hq, hv, scale);
    // Unit keys, values over |k| and beta |k|^2: the same update, whatever the key norms.
    for (index_t r = 0; r < n; ++r)
      beta_(r) = normalise_key<A>(core_.keys().row(r), core_.values().row(r),
                                  [&](double sq) { return Rule::beta(in, b, t0 + r, hv, sq); });
    if constexpr (vector_gated) core_.prepare(in, b, t0, hv, M_);  // the Gram with the scores
    else core_.prepare(in, b, t0, hv);
    if (n == 0) return;
    const auto& K = core_.keys();

    // M's strictly lower part becomes A = stril(diag(beta) (K K^T ⊙ Gam)).   [n, n]
    // Only the strictly lower part is used: row r against keys [0, r) (and a few more, up to
    // its row block's end), Kᵀ's rows read in place. A per-key gate decays inside the sum over
    // key dimensions: the additive span's pivoted scores, with keys in place of queries (made
    // by prepare).
    auto M = M_.topLeftCorner(n, n);
    if constexpr (!vector_gated)
      gemm<triangle::lower_c>(M, rows_of(K.topRows(n)), core_.keys_transposed().leftCols(n), {.diag = -1});
    for (index_t r = 1; r < n; ++r) {
      if constexpr (gated) {
        // Whole packets: exp(min(b_r - b_i, 0)) up to the next multiple of 16 columns (the
        // entries from column r on are the diagonal and upper part, which A does not use).
        const auto g = core_.scalar_gates();
        const index_t w = std::min(n, (r + 15) / 16 * 16);
        M.row(r).head(w).array() *=
            beta_(r) * ((-g.head(w)).array() + g(r)).min(Cum(0)).template cast<A>().exp().transpose();
      } else {
        M.row(r).head(r) *= beta_(r);
      }
    }

    // -exp(b): the row factors of -diag(exp(b)) K H in emit (keys decayed to the span start);
    // per key dimension: K ⊙ exp(b).
    if constexpr (gated) nd_.head(n) = -core_.scalar_gate_exps().head(n);
    if constexpr (vector_gated)
      Kd_.topRows(n) = K.topRows(n).cwiseProduct(core_.vector_gate_exps().topRows(n));

    if (n <= T_.rows()) {
      auto Tm = T_.topLeftCorner(n, n);  // T = (I + A)^{-1} diag(beta)   [n, n]
      Tm.setZero();
      Tm.diagonal() = beta_.head(n);
      unit_lower_solve(M, Tm, n);
      t_norm_ = Tm.cwiseAbs().rowwise().sum().template maxCoeff<Eigen::PropagateNaN>();  // ||T||_inf
    }
  }

  /// Outputs of the span given the state H at its start; the values become
  /// U~ = T X with X = V - diag(exp(b)) K H.
  ///
  /// With unnormalised keys (beta ||k||^2 > 2) the recurrence diverges and T grows
  /// geometrically along the span: the partial sums of T X then dwarf U~ (the recurrence's
  /// own corrections beta_r (v_r - S_{r-1} k_r)) and cancel most digits, or overflow. Such a
  /// span (and every span longer than max_chunk_size, which has no explicit T) computes U~ by
  /// forward substitution, (I + A) U~ = diag(beta) X, whose intermediates are the corrections
  /// themselves. With normalised keys (|T| = O(1)) this path is not taken.
  template <class Out>
  void emit(const mat<A>& H, const Out& out, index_t b, index_t t0, index_t hv) {
    const index_t n = core_.length();
    auto X = X_.topRows(n);              // [n, V]
    auto V = core_.values().topRows(n);  // the span's v, replaced by U~
    X = V;
    if constexpr (vector_gated) gemm(X, rows_of(Kd_.topRows(n)), H, {.alpha = A(-1), .beta = A(1)});  // X -= (K ⊙ exp(b)) H
    else gemm(X, rows_of(core_.keys().topRows(n)), H, {.row_alpha = nd_.data(), .beta = A(1)});  // X -= diag(exp(b)) K H
    bool done = false;
    if (n <= T_.rows()) {
      gemm<triangle::lower_a>(V, rows_of(T_.topLeftCorner(n, n)), X);  // U~ = T X
      const A x = finite_max_abs(X), ut = finite_max_abs(V);
      done = std::isfinite(x) && std::isfinite(ut) && std::isfinite(t_norm_) && t_norm_ * x <= ut * max_cancellation;
    }
    if (!done) {
      V.noalias() = beta_.head(n).asDiagonal() * X;
      unit_lower_solve(M_, V, n);
    }
    core_.emit(H, out, b, t0, hv);
  }

  /// H <- state after the span (uses U~ from emit).
  void advance(mat<A>& H) { core_.advance(H); }

 private:
  /// max |x_ij|, or NaN when an entry is not finite: a finiteness pass and a plain maximum,
  /// both vectorised with independent partial results (a NaN-propagating maximum is one
  /// dependent chain of compares and blends, several times slower).
  template <class X>
  static A finite_max_abs(const X& x) {
    return all_finite(x) ? x.cwiseAbs().maxCoeff() : std::numeric_limits<A>::quiet_NaN();
  }

  additive_worker<Rule, T, A, Cum> core_;  // Q, K, V (then U~), gate cumsum; scores, reads, writes
  col_vec<A> beta_;                      // [cap]
  mat<A> M_;                             // [cap, cap]  strictly lower part: A
  mat<A> T_;                             // [cap, cap]  T, for spans up to max_chunk_size
  A t_norm_ = 0;                         //             ||T||_inf (max row sum of |T|)
  col_vec<A> nd_;                        // [cap]       -exp(b) (-1 without a gate)
  mat<A> X_;                             // [cap, V]    V - exp(b) K H
  mat<A> Kd_;                            // [cap, K]    K ⊙ exp(b) (per-key gate)
};

}  // namespace linattn::cpu
