// SPDX-License-Identifier: MIT
/// \file
/// CPU kernels of the nonparametric rules over one (sequence, value head),
/// docs/math.md#softmax-attention and docs/math.md#local-linear-attention.
/// Q holds scale * q; K, V the sequence's keys and values.
///
///   direct:  exact softmax per row tile: S = Q K^T (causal), subtract the row max, exp, P V / l
///            (the parallel form; the recurrent form is the same with one row per tile);
///   online:  FlashAttention-style tiling (chunkwise form): per query tile and key block j,
///              m' = max(m, rowmax S_j),  l = e^{m - m'} l + rowsum e^{S_j - m'},
///              acc = e^{m - m'} acc + e^{S_j - m'} V_j,   o = acc / l;
///   local_linear: per query, softmax weights then the ridged weighted linear fit.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>


#include "../../core/tensor_view.hpp"
#include "../linalg/eigen_types.hpp"
#include "../io/token_io.hpp"

namespace linattn::cpu {

template <class T, class A>
class softmax_worker {
 public:
  /// `capacity`: longest sequence; `tile`: query rows per tile (and key block of `online`).
  softmax_worker(index_t capacity, index_t K, index_t V, index_t tile)
      : Q_(capacity, K), K_(capacity, K), V_(capacity, V), S_(std::min(tile, capacity), std::max<index_t>(capacity, 1)),
        O_(std::min(tile, capacity), V), m_(std::min(tile, capacity)), l_(std::min(tile, capacity)) {}

  /// Loads tokens [t0, t0 + n) of batch row b: q/k of head hq (q times `scale`), v of head hv.
  void load(const tensor_view<const T, 4>& q, const tensor_view<const T, 4>& k, const tensor_view<const T, 4>& v,
            index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale) {
    n_ = n;
    load_rows(q, b, t0, hq, n, Q_, scale);
    load_rows(k, b, t0, hq, n, K_, A(1));
    load_rows(v, b, t0, hv, n, V_, A(1));
  }

  /// Exact two-pass softmax, `tile` query rows at a time.
  void direct(const tensor_view<T, 4>& out, index_t b, index_t t0, index_t hv, index_t tile) {
    for (index_t r0 = 0; r0 < n_; r0 += tile) {
      const index_t m = std::min(tile, n_ - r0), r1 = r0 + m;
      auto S = S_.topLeftCorner(m, r1);  // [m, r1] scores, then unnormalised weights
      S.noalias() = Q_.middleRows(r0, m) * K_.topRows(r1).transpose();
      for (index_t r = 0; r < m; ++r) {
        auto row = S.row(r).head(r0 + r + 1);
        row = (row.array() - row.maxCoeff()).exp();
        l_(r) = row.sum();
        S.row(r).tail(m - r - 1).setZero();
      }
      auto O = O_.topRows(m);  // [m, V]
      O.noalias() = S * V_.topRows(r1);
      O = l_.head(m).cwiseInverse().asDiagonal() * O;
      store_rows(out, b, t0 + r0, hv, m, O);
    }
  }

  /// Online softmax over key blocks of `C` tokens, `C` query rows at a time.
  void online(const tensor_view<T, 4>& out, index_t b, index_t t0, index_t hv, index_t C) {
    constexpr A lowest = -std::numeric_limits<A>::infinity();
    for (index_t i0 = 0; i0 < n_; i0 += C) {
      const index_t m = std::min(C, n_ - i0);
      auto acc = O_.topRows(m);  // [m, V]
      acc.setZero();
      m_.head(m).setConstant(lowest);
      l_.head(m).setZero();
      for (index_t j0 = 0; j0 <= i0; j0 += C) {
        const index_t kb = j0 == i0 ? m : C;  // the diagonal block is causal
        auto S = S_.topLeftCorner(m, kb);     // [m, kb]
        S.noalias() = Q_.middleRows(i0, m) * K_.middleRows(j0, kb).transpose();
        for (index_t r = 0; r < m; ++r) {
          auto row = S.row(r).head(j0 == i0 ? r + 1 : kb);
          const A mx = std::max(m_(r), row.maxCoeff());
          const A alpha = std::exp(m_(r) - mx);
          row = (row.array() - mx).exp();
          if (j0 == i0) S.row(r).tail(kb - r - 1).setZero();
          l_(r) = alpha * l_(r) + row.sum();
          acc.row(r) *= alpha;
          m_(r) = mx;
        }
        acc.noalias() += S * V_.middleRows(j0, kb);
      }
      acc = l_.head(m).cwiseInverse().asDiagonal() * acc;
      store_rows(out, b, t0 + i0, hv, m, acc);
    }
  }

 private:
  mat<A> Q_, K_, V_;   // [cap, K], [cap, K], [cap, V]
  mat<A> S_, O_;       // [tile, cap], [tile, V]
  col_vec<A> m_, l_;   // [tile] running max and normaliser
  index_t n_ = 0;
};

/// One decode token of softmax attention over cached keys [len, K] and values [len, V].
template <class A>
void softmax_read(const A* keys, const A* values, index_t len, index_t K, index_t V, const row_vec<A>& q,
                  col_vec<A>& s, row_vec<A>& o) {
  const Eigen::Map<const mat<A>> Kc(keys, len, K), Vc(values, len, V);
  s.resize(len);
  s.noalias() = Kc * q.transpose();
  s = (s.array() - s.maxCoeff()).exp();
  o.noalias() = s.transpose() * Vc;
  o /= s.sum();
}

template <class T, class A>
class local_linear_worker {
 public:
  local_linear_worker(index_t capacity, index_t K, index_t V)
      : Qs_(capacity, K), Q_(capacity, K), K_(capacity, K), V_(capacity, V), Kc_(capacity, K), Wk_(capacity, K),
        w_(capacity), Skk_(K, K), Svk_(K, V), x_(K), o_(V), llt_(mat<A>::Identity(1, 1)) {}

  /// Outputs of tokens [t0, t0 + n) of batch row b (q/k head hq, value head hv).
  void run(const tensor_view<const T, 4>& q, const tensor_view<const T, 4>& k, const tensor_view<const T, 4>& v,
           const tensor_view<T, 4>& out, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale, A ridge) {
    load_rows(q, b, t0, hq, n, Qs_, scale);
    load_rows(q, b, t0, hq, n, Q_, A(1));
    load_rows(k, b, t0, hq, n, K_, A(1));
    load_rows(v, b, t0, hv, n, V_, A(1));
    for (index_t t = 0; t < n; ++t) {
      const index_t len = t + 1;
      auto w = w_.head(len);  // softmax weights over i <= t
      w.noalias() = K_.topRows(len) * Qs_.row(t).transpose();
      w = (w.array() - w.maxCoeff()).exp();
      w /= w.sum();
      const row_vec<A> kbar = w.transpose() * K_.topRows(len);
      auto Kc = Kc_.topRows(len);  // [len, K] centred keys
      Kc = K_.topRows(len).rowwise() - kbar;
      auto Wk = Wk_.topRows(len);  // diag(w) Kc
      Wk.noalias() = w.asDiagonal() * Kc;
      Skk_.noalias() = Kc.transpose() * Wk;
      Skk_.diagonal().array() += ridge;
      Svk_.noalias() = Wk.transpose() * V_.topRows(len);  // [K, V] = Svk^T (sum Wk = 0 removes vbar)
      x_ = (Q_.row(t) - kbar).transpose();
      llt_.compute(Skk_);
      llt_.solveInPlace(x_);
      o_.noalias() = w.transpose() * V_.topRows(len);
      o_.noalias() += x_.transpose() * Svk_;
      store_rows(out, b, t0 + t, hv, 1, o_);
    }
  }

 private:
  mat<A> Qs_, Q_, K_, V_, Kc_, Wk_;  // [cap, K] x4 ([cap, V] for V_)
  col_vec<A> w_;                     // [cap]
  mat<A> Skk_, Svk_;                 // [K, K], [K, V]
  col_vec<A> x_;                     // [K]
  row_vec<A> o_;                     // [V]
  Eigen::LLT<mat<A>> llt_;  // built from a 1 x 1 factorisation: Eigen leaves info() unset otherwise
};

}  // namespace linattn::cpu
