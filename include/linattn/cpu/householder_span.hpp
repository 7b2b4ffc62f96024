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
///
/// after which the span is an additive (decay) span with values U~: outputs
/// diag(exp(b)) Q H + (Q K^T ⊙ Gam) U~ and state exp(b_n) H + (diag(exp(b_n - b)) K)^T U~
/// ((iii)-(v)), computed by `additive_span`. Every exponent is <= 0.
#pragma once

#include <cmath>

#include "../core/config.hpp"
#include "../core/family.hpp"
#include "../core/tensor_view.hpp"
#include "additive_span.hpp"
#include "eigen_types.hpp"
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
  /// `load` does the chunk-local work (Gram, T, W, U) that chunks may do in parallel.
  static constexpr bool chunk_local_load = true;

  /// Spans up to max_chunk_size tokens (chunks) form T explicitly; longer ones (the parallel
  /// form over a whole sequence) solve (I + A) [W U] = diag(beta) [exp(b) K, V] directly,
  /// which costs O(n^2 (K + V)) instead of O(n^3).
  householder_span(index_t capacity, index_t K, index_t V)
      : core_(capacity, K, V), beta_(capacity), M_(capacity, capacity), W_(capacity, K), U_(capacity, V),
        Kd_(capacity, K), Ut_(capacity, V) {
    if (capacity <= max_chunk_size) T_.resize(capacity, capacity);
  }

  void load(const inputs_t& in, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale) {
    core_.load(in, b, t0, n, hq, hv, scale);
    if (n == 0) return;
    const auto& K = core_.keys();
    const auto& V = core_.values();
    for (index_t r = 0; r < n; ++r) beta_(r) = Rule::beta(in, b, t0 + r, hv, K.row(r).squaredNorm());

    // M's strictly lower part becomes A = stril(diag(beta) (K K^T ⊙ Gam)).   [n, n]
    auto M = M_.topLeftCorner(n, n);
    M.noalias() = K.topRows(n) * K.topRows(n).transpose();
    for (index_t r = 1; r < n; ++r) {
      if constexpr (gated) {
        const auto g = core_.scalar_gates();
        M.row(r).head(r).array() *= beta_(r) * ((-g.head(r)).array() + g(r)).template cast<A>().exp().transpose();
      } else {
        M.row(r).head(r) *= beta_(r);
      }
    }

    // Kd = diag(exp(b)) K: keys decayed to the start of the span.   [n, K]
    if constexpr (gated)
      Kd_.topRows(n).noalias() =
          core_.scalar_gates().head(n).template cast<A>().array().exp().matrix().asDiagonal() * K.topRows(n);
    else
      Kd_.topRows(n) = K.topRows(n);

    if (n <= T_.rows()) {
      auto Tm = T_.topLeftCorner(n, n);  // T = (I + A)^{-1} diag(beta)   [n, n]
      Tm.setZero();
      Tm.diagonal() = beta_.head(n);
      unit_lower_solve(M, Tm, n);
      W_.topRows(n).noalias() = Tm.template triangularView<Eigen::Lower>() * Kd_.topRows(n);
      U_.topRows(n).noalias() = Tm.template triangularView<Eigen::Lower>() * V.topRows(n);
    } else {
      W_.topRows(n).noalias() = beta_.head(n).asDiagonal() * Kd_.topRows(n);
      U_.topRows(n).noalias() = beta_.head(n).asDiagonal() * V.topRows(n);
      unit_lower_solve(M, W_.topRows(n), n);
      unit_lower_solve(M, U_.topRows(n), n);
    }
  }

  /// Outputs of the span given the state H at its start; the values become U~ = U - W H.
  ///
  /// With unnormalised keys (beta ||k||^2 > 2) the recurrence diverges and T, W grow
  /// geometrically along the span: W H then dwarfs U~ (the recurrence's own corrections
  /// beta_r (v_r - S_{r-1} k_r)) and the subtraction cancels most digits, or overflows. Such
  /// a span recomputes U~ by forward substitution, (I + A) U~ = diag(beta) (V - diag(exp(b)) K H),
  /// whose intermediates are the corrections themselves. With normalised keys (|T| = O(1))
  /// this path is not taken.
  void emit(const mat<A>& H, const tensor_view<T, 4>& out, index_t b, index_t t0, index_t hv) {
    const index_t n = core_.length();
    auto WH = Ut_.topRows(n);  // [n, V]
    WH.noalias() = W_.topRows(n) * H;
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

  /// H <- state after the span (uses U~ from emit).
  void advance(mat<A>& H) { core_.advance(H); }

 private:
  additive_span<Rule, T, A, Cum> core_;  // Q, K, V (then U~), gate cumsum; scores, reads, writes
  col_vec<A> beta_;                      // [cap]
  mat<A> M_;                             // [cap, cap]  strictly lower part: A
  mat<A> T_;                             // [cap, cap]  T, for spans up to max_chunk_size
  mat<A> W_, U_, Kd_, Ut_;               // [cap, K], [cap, V], [cap, K], [cap, V]
};

}  // namespace linattn::cpu
