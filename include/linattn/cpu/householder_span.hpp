// SPDX-License-Identifier: MIT
/// \file
/// The Householder (delta-rule) family over one span of tokens of one (sequence, value head):
/// a chunk of the chunkwise form or a whole sequence in the parallel form, through the WY/UT
/// representation (MATH.md §3.1-§3.4, §4.1). Per span, with b the local log-gate cumsum and
/// Gam_ri = exp(b_r - b_i) (i <= r; Gam = 1 without a gate):
///
///   A  = stril(diag(beta) (K K^T ⊙ Gam))            (i)   gates enter the UT transform
///   T  = (I + A)^{-1} diag(beta)                     blocked forward substitution
///   W  = T diag(exp(b)) K,   U = T V                 (ii)  keys decayed to the span start
///   U~ = U - W H                                     H = state at span start  [K, V]
///   O  = diag(exp(b)) Q H + P U~,   P = tril(Q K^T ⊙ Gam)        (iii), (iv)
///   H <- exp(b_n) H + (diag(exp(b_n - b)) K)^T U~                  (v)
///
/// Chunks (spans up to max_chunk_size) split this into a chunk-local part that needs no state,
/// done by `load` (and so free to run for many chunks at once), and a state pass:
///
///   load:   T, W, U, P, Q' = diag(exp(b)) Q - P W, PU = P U, Kf = diag(exp(b_n - b)) K
///   state:  [R_w; R_q] = [W; Q'] H (one product),  U~ = U - R_w,  O = R_q + PU,
///           H <- exp(b_n) H + Kf^T U~
///
/// since P U~ = P U - P W H. The state pass treats H in column blocks of `column_block` value
/// columns (the delta rule acts on the key side, so value columns evolve independently); the
/// blocks are the same whatever the thread count, so results are too. Longer spans (the
/// parallel form over a whole sequence) solve (I + A) [W U] = diag(beta) [exp(b) K, V] and
/// hand U~ to `additive_span`. Every exponent is <= 0.
#pragma once

#include <algorithm>
#include <cmath>

#include "../core/config.hpp"
#include "../core/family.hpp"
#include "../core/tensor_view.hpp"
#include "additive_span.hpp"
#include "eigen_types.hpp"
#include "token_io.hpp"
#include "unit_lower_solve.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A, class Cum>
class householder_span {
 public:
  using inputs_t = typename Rule::template inputs<T>;
  static constexpr bool gated = Rule::decay == decay_kind::scalar;
  static_assert(Rule::decay != decay_kind::vector, "vector-gated delta rules have no CPU span kernel yet");

  /// Largest ratio max|W H| / max|U - W H| accepted from the WY form: it loses about log2 of
  /// this many mantissa bits (8 of float's 24, 17 of double's 53).
  static constexpr A max_cancellation = sizeof(A) == 4 ? A(256) : A(131072);
  /// Value columns per block of the state pass (fixed: results must not depend on threads).
  static constexpr index_t column_block = 64;

  householder_span(index_t capacity, index_t K, index_t V)
      : core_(capacity, K, V), chunked_(capacity <= max_chunk_size), beta_(capacity), eb_(capacity),
        e_(capacity), M_(capacity, capacity), Kd_(capacity, K) {
    if (chunked_) {
      T_.resize(capacity, capacity);
      P_.resize(capacity, capacity);
      WQ_.resize(2 * capacity, K);
      R_.resize(2 * capacity, V);
      U_.resize(capacity, V);
      PU_.resize(capacity, V);
      Ut_.resize(capacity, V);
      O_.resize(capacity, V);
      Kf_.resize(capacity, K);
    } else {
      WQ_.resize(capacity, K);  // W
      U_.resize(capacity, V);
      Ut_.resize(capacity, V);
    }
  }

  /// Loads tokens [t0, t0 + n) and does all the span's work that does not need the state.
  void load(const inputs_t& in, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale) {
    core_.load(in, b, t0, n, hq, hv, scale);
    if (n == 0) return;
    const auto& K = core_.keys();
    const auto& V = core_.values();
    for (index_t r = 0; r < n; ++r) beta_(r) = Rule::beta(in, b, t0 + r, hv, K.row(r).squaredNorm());

    // Kd = diag(exp(b)) K: keys decayed to the start of the span.   [n, K]
    if constexpr (gated) {
      eb_.head(n) = core_.scalar_gates().head(n).template cast<A>().array().exp().matrix();
      Kd_.topRows(n).noalias() = eb_.head(n).asDiagonal() * K.topRows(n);
    } else
      Kd_.topRows(n) = K.topRows(n);

    // M's strictly lower part becomes A = stril(diag(beta) (K K^T ⊙ Gam)).   [n, n]
    auto M = M_.topLeftCorner(n, n);
    if (!chunked_) {
      M.noalias() = K.topRows(n) * K.topRows(n).transpose();
      for (index_t r = 1; r < n; ++r) M.row(r).head(r).array() *= beta_(r) * gam(r, r).array();
      auto W = WQ_.topRows(n);
      W.noalias() = beta_.head(n).asDiagonal() * Kd_.topRows(n);
      U_.topRows(n).noalias() = beta_.head(n).asDiagonal() * V.topRows(n);
      unit_lower_solve(M, W, n);
      unit_lower_solve(M, U_.topRows(n), n);
      return;
    }

    // Lower triangles only: Gram K K^T and scores P = Q K^T, both times Gam.   [n, n]
    auto P = P_.topLeftCorner(n, n);
    M.template triangularView<Eigen::Lower>() = K.topRows(n) * K.topRows(n).transpose();
    P.template triangularView<Eigen::Lower>() = core_.queries().topRows(n) * K.topRows(n).transpose();
    for (index_t r = 0; r < n; ++r) {
      if constexpr (gated) {
        const auto e = gam(r, r + 1);  // exp(b_r - b_c), c <= r
        P.row(r).head(r + 1).array() *= e.array();
        M.row(r).head(r).array() *= beta_(r) * e.head(r).array();
      } else {
        M.row(r).head(r) *= beta_(r);
      }
    }

    auto Tm = T_.topLeftCorner(n, n);  // T = (I + A)^{-1} diag(beta)   [n, n]
    Tm.setZero();
    Tm.diagonal() = beta_.head(n);
    unit_lower_solve(M, Tm, n);
    auto W = WQ_.topRows(n), Qp = WQ_.middleRows(n, n);  // [n, K] each
    W.noalias() = Tm.template triangularView<Eigen::Lower>() * Kd_.topRows(n);
    U_.topRows(n).noalias() = Tm.template triangularView<Eigen::Lower>() * V.topRows(n);

    // Q' = diag(exp(b)) Q - P W and PU = P U: the state-free parts of the outputs.
    if constexpr (gated)
      Qp.noalias() = eb_.head(n).asDiagonal() * core_.queries().topRows(n);
    else
      Qp = core_.queries().topRows(n);
    Qp.noalias() -= P.template triangularView<Eigen::Lower>() * W;
    PU_.topRows(n).noalias() = P.template triangularView<Eigen::Lower>() * U_.topRows(n);

    // Kf = diag(exp(b_n - b)) K: each write decayed to the end of the span.   [n, K]
    if constexpr (gated) {
      const auto g = core_.scalar_gates();
      Kf_.topRows(n).noalias() =
          ((-g.head(n)).array() + g(n - 1)).template cast<A>().exp().matrix().asDiagonal() * K.topRows(n);
      decay_ = std::exp(static_cast<A>(g(n - 1)));
    } else {
      Kf_.topRows(n) = K.topRows(n);
    }
    // Overflowed W or U (a diverging rule): the state pass takes the careful path.
    finite_ = all_finite(WQ_.topRows(2 * n)) && all_finite(U_.topRows(n)) && all_finite(PU_.topRows(n));
  }

  /// Outputs of the span given the state H at its start (all value columns).
  void emit(const mat<A>& H, const tensor_view<T, 4>& out, index_t b, index_t t0, index_t hv) {
    if (!chunked_) return emit_long(H, out, b, t0, hv);
    for (index_t v0 = 0; v0 < H.cols(); v0 += column_block) emit_columns(H, v0, std::min(column_block, H.cols() - v0));
    store_rows(out, b, t0, hv, core_.length(), O_.topRows(core_.length()));
  }

  /// H <- state after the span (uses U~ from emit).
  void advance(mat<A>& H) {
    if (!chunked_) return core_.advance(H);
    for (index_t v0 = 0; v0 < H.cols(); v0 += column_block) advance_columns(H, v0, std::min(column_block, H.cols() - v0));
  }

  /// State pass of value columns [v0, v0 + w) (chunks only): U~ and the outputs of those
  /// columns, from the state H at span start.
  ///
  /// With unnormalised keys (beta ||k||^2 > 2) the recurrence diverges and T, W grow
  /// geometrically along the span: W H then dwarfs U~ (the recurrence's own corrections
  /// beta_r (v_r - S_{r-1} k_r)) and the subtraction cancels most digits, or overflows. Such
  /// a block recomputes U~ by forward substitution, (I + A) U~ = diag(beta) (V - diag(exp(b)) K H),
  /// whose intermediates are the corrections themselves, and the outputs as
  /// diag(exp(b)) Q H + P U~. With normalised keys (|T| = O(1)) this path is not taken.
  void emit_columns(const mat<A>& H, index_t v0, index_t w) {
    const index_t n = core_.length();
    if (n == 0) return;
    const auto Hb = H.middleCols(v0, w);         // [K, w]
    auto R = R_.topLeftCorner(2 * n, w);         // [2n, w]: W H over Q' H
    R.noalias() = WQ_.topRows(2 * n) * Hb;
    auto Ut = Ut_.block(0, v0, n, w);            // [n, w]
    Ut = U_.block(0, v0, n, w) - R.topRows(n);
    if (finite_) {
      const A wh = R.topRows(n).cwiseAbs().template maxCoeff<Eigen::PropagateNaN>();
      const A ut = Ut.cwiseAbs().template maxCoeff<Eigen::PropagateNaN>();
      if (std::isfinite(wh) && wh <= ut * max_cancellation) {
        O_.block(0, v0, n, w) = R.bottomRows(n) + PU_.block(0, v0, n, w);
        return;
      }
    }
    careful_columns(Hb, v0, w);
  }

  /// H[:, v0:v0+w] <- its state after the span (uses U~ from emit_columns).
  void advance_columns(mat<A>& H, index_t v0, index_t w) {
    const index_t n = core_.length();
    if (n == 0) return;
    auto Hb = H.middleCols(v0, w);
    if constexpr (gated) Hb *= decay_;
    Hb.noalias() += Kf_.topRows(n).transpose() * Ut_.block(0, v0, n, w);
  }

  /// Writes value columns [v0, v0 + w) of the span's outputs (after emit_columns).
  void store_columns(const tensor_view<T, 4>& out, index_t b, index_t t0, index_t hv, index_t v0, index_t w) const {
    const index_t n = core_.length();
    for (index_t r = 0; r < n; ++r)
      for (index_t j = 0; j < w; ++j) out(b, t0 + r, hv, v0 + j) = static_cast<T>(O_(r, v0 + j));
  }

  index_t length() const { return core_.length(); }

 private:
  /// Gam_rc = exp(b_r - b_c) for c < m (1 without a gate), in the workspace e_.   [m]
  auto gam(index_t r, index_t m) {
    auto e = e_.head(m);
    if constexpr (gated) {
      const auto g = core_.scalar_gates();
      e = ((-g.head(m)).array() + g(r)).template cast<A>().exp().matrix().transpose();
    } else {
      e.setOnes();
    }
    return e;
  }

  /// U~ by forward substitution and O = diag(exp(b)) Q H + P U~ for columns [v0, v0 + w).
  template <class HB>
  void careful_columns(const HB& Hb, index_t v0, index_t w) {
    const index_t n = core_.length();
    auto Ut = Ut_.block(0, v0, n, w);
    Ut = core_.values().block(0, v0, n, w);
    Ut.noalias() -= Kd_.topRows(n) * Hb;
    Ut = beta_.head(n).asDiagonal() * Ut;
    unit_lower_solve(M_, Ut, n);
    auto O = O_.block(0, v0, n, w);
    O.noalias() = core_.queries().topRows(n) * Hb;
    if constexpr (gated) O = eb_.head(n).asDiagonal() * O;
    // Only the causal prefix of each row: a later inf (times a masked zero) must not turn
    // earlier finite outputs into NaN.
    for (index_t i = 0; i < n; ++i) O.row(i).noalias() += P_.row(i).head(i + 1) * Ut.topRows(i + 1);
  }

  /// Long spans (parallel form): U~ = U - W H (or its forward substitution), then the
  /// additive span's outputs with values U~.
  void emit_long(const mat<A>& H, const tensor_view<T, 4>& out, index_t b, index_t t0, index_t hv) {
    const index_t n = core_.length();
    auto WH = Ut_.topRows(n);  // [n, V]
    WH.noalias() = WQ_.topRows(n) * H;
    auto V = core_.values().topRows(n);  // the span's v, replaced by U~
    const A wh = WH.cwiseAbs().template maxCoeff<Eigen::PropagateNaN>();
    WH = U_.topRows(n) - WH;
    const A ut = WH.cwiseAbs().template maxCoeff<Eigen::PropagateNaN>();
    if (std::isfinite(wh) && wh <= ut * max_cancellation) {
      V = WH;
    } else {
      V.noalias() -= Kd_.topRows(n) * H;
      V = beta_.head(n).asDiagonal() * V;
      unit_lower_solve(M_, V, n);
    }
    core_.emit(H, out, b, t0, hv);
  }

  additive_span<Rule, T, A, Cum> core_;  // Q, K, V, gate cumsum; the long-span outputs and state
  bool chunked_;                         // span <= max_chunk_size: T formed, split state pass
  bool finite_ = true;                   // W, Q', U, PU all finite
  A decay_ = A(1);                       // exp(b_n)
  col_vec<A> beta_, eb_;                 // [cap]       beta; exp(b)
  row_vec<A> e_;                         // [cap]       one row of Gam
  mat<A> M_;                             // [cap, cap]  strictly lower part: A
  mat<A> T_, P_;                         // [cap, cap]  T; causal decayed scores (lower part)
  mat<A> Kd_;                            // [cap, K]    diag(exp(b)) K
  mat<A> WQ_;                            // [2 cap, K]  W over Q' (long spans: W only)
  mat<A> R_;                             // [2 cap, V]  [W; Q'] H for one column block
  mat<A> U_, PU_, Ut_, O_;               // [cap, V]    U, P U, U~, outputs
  mat<A> Kf_;                            // [cap, K]    diag(exp(b_n - b)) K
};

}  // namespace linattn::cpu
