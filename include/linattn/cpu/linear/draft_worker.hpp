// SPDX-License-Identifier: MIT
/// \file
/// verify_drafts with a compact record (core/draft_record.hpp) for one (sequence, value head):
/// the n draft tokens in one read of the pool slot and no write of any state. With
/// c_j = g_0 + ... + g_j (the draft's cumulative log decay, per key row) and H_0 the slot
/// (`[K, V]`), the state before token j is
///
///   H_{j-1} = diag(exp(c_{j-1})) H_0 + sum_{i<j} diag(exp(c_{j-1} - c_i)) k_i u_i^T,
///
/// so the token worker's two reads of it (token_worker.hpp) become
///
///   a_j = (exp(c_j) k_j)^T H_0 + sum_{i<j} A_ji u_i,   A_ji = sum_d k_j[d] k_i[d] exp(c_j[d] - c_i[d])
///   r_j = (exp(c_j) q_j)^T H_0 + sum_{i<j} B_ji u_i,   B_ji = sum_d q_j[d] k_i[d] exp(c_j[d] - c_i[d])
///
/// The probes exp(c_j) q_j (and exp(c_j) k_j for the Householder family, which needs a_j) meet
/// H_0 in one product ([2n, K] x [K, V]);
/// then, token after token, u_j = beta_j (v_j - a_j) (Householder) or c_t v_j (additive) and
/// o_j = r_j + (q_j . k_j) u_j. The record keeps (k_j, u_j, g_j). Log gates are floored
/// (safe_coefficients.hpp) and summed in double, so every exponent is finite and <= 0.
#pragma once

#include <algorithm>
#include <type_traits>
#include <vector>

#include "../../core/draft_record.hpp"
#include "../../core/family.hpp"
#include "../../core/tensor_view.hpp"
#include "../io/token_io.hpp"
#include "../linalg/eigen_types.hpp"
#include "rule_coefficients.hpp"
#include "safe_coefficients.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class draft_worker {
 public:
  using inputs_t = typename Rule::template inputs<T>;
  using state_scalar = A;
  static constexpr bool corrects = std::is_same_v<typename Rule::family, householder_family>;
  static constexpr decay_kind decay = Rule::decay;

  draft_worker(index_t K, index_t V) : K_(K), V_(V), gates_(std::size_t(K)) {}

  /// Draft tokens [t0, t0 + n) of batch row b, value head hv (q/k head hq) of sequence seq,
  /// from slot `slot` of `pool` (< 0: the zero state): outputs into `out`, record entries
  /// 0..n-1 of the sequence into `rec`.
  template <class Out, class Pool>
  void run(const inputs_t& in, const Out& out, const Pool& pool, const draft_record<A>& rec, index_t slot,
           index_t seq, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale) {
    if (n == 0) return;
    load_tokens(in, b, t0, n, hq, hv, scale);
    const index_t qo = corrects ? n : 0;  // the rows of X_ that hold r_j
    read_slot(pool, slot, hv, n, qo);     // X_ = probes^T H_0
    const index_t G = rec.log_decay.extent(3);
    for (index_t j = 0; j < n; ++j) {
      auto r = X_.row(qo + j);  // r_j, then o_j   [V]
      for (index_t i = 0; i < j; ++i) {
        A kk, qk;
        pair_coefficients(i, j, kk, qk);
        if constexpr (corrects) X_.row(j).noalias() += kk * U_.row(i);  // a_j   [V]
        r.noalias() += qk * U_.row(i);
      }
      if constexpr (corrects) U_.row(j) = beta_(j) * (U_.row(j) - X_.row(j));
      r.noalias() += Q_.row(j).dot(Kt_.row(j)) * U_.row(j);
      for (index_t d = 0; d < K_; ++d) rec.keys(seq, j, hv, d) = Kt_(j, d);
      for (index_t d = 0; d < V_; ++d) rec.updates(seq, j, hv, d) = U_(j, d);
      for (index_t d = 0; d < G; ++d) rec.log_decay(seq, j, hv, d) = static_cast<A>(gate(j, G == 1 ? 0 : d));
    }
    store_rows(out, b, t0, hv, n, X_.bottomRows(n));  // rows qo..qo+n-1 = the last n
  }

 private:
  /// The tokens' rows: scaled queries, keys and values (Householder: unit keys, values and
  /// beta rescaled to match), the write coefficient folded into the value (additive), the
  /// floored log gates and their cumulative sums in double.
  void load_tokens(const inputs_t& in, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale) {
    Q_.resize(n, K_), Kt_.resize(n, K_), U_.resize(n, V_), beta_.resize(n);
    const index_t width = decay == decay_kind::vector ? K_ : 1;
    G_.resize(n, width), C_.resize(n, width);
    load_qkv_rows(in, b, t0, n, hq, hv, scale, Q_, Kt_, U_);
    for (index_t j = 0; j < n; ++j) {
      const index_t t = t0 + j;
      if constexpr (corrects)
        beta_(j) = normalise_key<A>(Kt_.row(j), U_.row(j), [&](double sq) { return Rule::beta(in, b, t, hv, sq); });
      else if constexpr (scales_write<Rule, inputs_t>)
        U_.row(j) *= write_coefficient<Rule, A>(in, b, t, hv);
      if constexpr (decay == decay_kind::scalar) {
        G_(j, 0) = floored_gate<A>(Rule::log_gate(in, b, t, hv));
      } else if constexpr (decay == decay_kind::vector) {
        vector_log_gates<Rule>(in, b, t, hv, K_, gates_.data());
        for (index_t d = 0; d < K_; ++d) G_(j, d) = floored_gate<A>(gates_[std::size_t(d)]);
      } else {
        G_(j, 0) = 0.0;
      }
      if (j == 0) C_.row(0) = G_.row(0);
      else C_.row(j) = C_.row(j - 1) + G_.row(j);
    }
  }

  /// X_ rows qo..qo+n-1 = (exp(c_j) q_j)^T H_0 and, for the Householder family (qo = n), rows
  /// 0..n-1 = (exp(c_j) k_j)^T H_0: one pass over the slot, read in place when its rows are
  /// unit-stride.   X_: [qo + n, V]
  template <class Pool>
  void read_slot(const Pool& pool, index_t slot, index_t hv, index_t n, index_t qo) {
    X_.resize(qo + n, V_);
    if (slot < 0 || !pool.given()) {
      X_.setZero();
      return;
    }
    P_.resize(qo + n, K_);
    for (index_t j = 0; j < n; ++j) {
      if constexpr (decay == decay_kind::vector) {
        e_ = C_.row(j).template cast<A>().array().exp().matrix();
        if constexpr (corrects) P_.row(j) = Kt_.row(j).cwiseProduct(e_);
        P_.row(qo + j) = Q_.row(j).cwiseProduct(e_);
      } else {
        const A e = std::exp(static_cast<A>(C_(j, 0)));
        if constexpr (corrects) P_.row(j) = e * Kt_.row(j);
        P_.row(qo + j) = e * Q_.row(j);
      }
    }
    if (pool.stride(3) == 1) {
      probe_reads(&pool(slot, hv, 0, 0), pool.stride(2));
    } else {
      H_.resize(K_, V_);
      load_state(pool, slot, hv, H_);
      probe_reads(H_.data(), V_);
    }
  }

  /// Columns per strip of probe_reads: two 64-byte vectors.
  static constexpr index_t strip = 2 * 64 / index_t(sizeof(A));
  using block = Eigen::Array<A, 1, strip>;

  /// X_ = P_ H (H [K, V], rows ld apart), strip by strip: a strip of H (K x 128 bytes) is read
  /// from memory once and then from L1 by each group of up to four probes, whose accumulators
  /// stay in registers over all K rows. Each entry sums over the rows in order.
  void probe_reads(const A* h0, index_t ld) {
    const index_t R = P_.rows();
    index_t j = 0;
    for (; j + strip <= V_; j += strip)
      for (index_t r = 0; r < R; r += 4) {
        switch (std::min<index_t>(4, R - r)) {
          case 1: probe_strip<1>(h0, ld, r, j); break;
          case 2: probe_strip<2>(h0, ld, r, j); break;
          case 3: probe_strip<3>(h0, ld, r, j); break;
          default: probe_strip<4>(h0, ld, r, j); break;
        }
      }
    for (; j < V_; ++j)  // the tail columns
      for (index_t r = 0; r < R; ++r) {
        A x = A(0);
        for (index_t i = 0; i < K_; ++i) x += P_(r, i) * h0[i * ld + j];
        X_(r, j) = x;
      }
  }

  template <int M>
  void probe_strip(const A* h0, index_t ld, index_t r0, index_t j) {
    block acc[M];
    for (int m = 0; m < M; ++m) acc[m].setZero();
    for (index_t i = 0; i < K_; ++i) {
      const block h = Eigen::Map<const block>(h0 + i * ld + j);
      for (int m = 0; m < M; ++m) acc[m] += P_(r0 + m, i) * h;
    }
    for (int m = 0; m < M; ++m) X_.row(r0 + m).template segment<strip>(j) = acc[m].matrix();
  }

  /// A_ji (kk) and B_ji (qk) for i < j: the key-key and query-key products of the two tokens
  /// weighted by the decay between them, exp(c_j - c_i) <= 1.
  void pair_coefficients(index_t i, index_t j, A& kk, A& qk) {
    if constexpr (decay == decay_kind::vector) {
      e_ = (C_.row(j) - C_.row(i)).template cast<A>().array().exp().matrix().cwiseProduct(Kt_.row(i));
      kk = Kt_.row(j).dot(e_);
      qk = Q_.row(j).dot(e_);
    } else {
      const A e = decay == decay_kind::scalar ? std::exp(static_cast<A>(C_(j, 0) - C_(i, 0))) : A(1);
      kk = e * Kt_.row(j).dot(Kt_.row(i));
      qk = e * Q_.row(j).dot(Kt_.row(i));
    }
  }

  double gate(index_t j, index_t d) const { return G_(j, decay == decay_kind::vector ? d : 0); }

  index_t K_, V_;
  mat<A> Q_, Kt_;            // [n, K] scaled queries; keys (Householder: unit keys)
  mat<A> U_;                 // [n, V] values, then each token's write u_j
  mat<A> P_, X_;             // [2n or n, K] probes; [2n or n, V] their reads of H_0: a_j, then o_j
  mat<A> H_;                 // [K, V] the slot, when its rows are not unit-stride
  row_vec<A> beta_, e_;      // [n] write strengths (Householder); [K] pair weights
  mat<double> G_, C_;        // [n, K or 1] floored log gates and their cumulative sums
  std::vector<double> gates_;  // [K] one token's log gates (vector decay)
};

}  // namespace linattn::cpu
