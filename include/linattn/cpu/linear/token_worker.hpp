// SPDX-License-Identifier: MIT
/// \file
/// Token-by-token recurrence of the matrix-state rules (docs/math.md#hebbian through
/// docs/math.md#nlms): the definition of every rule, and the decode path. Per token, with
/// H = S^T ([K, V]) and d the decay (1, exp(g_t), or exp(g_t) per key row):
///
///   a  = (d ⊙ k_t)^T H,   c = (d ⊙ q_t)^T H       one read of H                 [V], [V]
///   u  = v_t                                      additive family (Hebbian write)
///   u  = beta_t (v_t - a)                         Householder family (erase, then write)
///   o_t = c + (q_t . k_t) u                       = q_t^T H_new
///   H <- diag(d) H + k_t u^T                      one read-modify-write of H
///
/// The diagonal-plus-low-rank family (RWKV-7) reads a = a_t^T H (the undecayed state) and
/// writes twice: o_t = c + (q_t . b_t) a + (q_t . k_t) v_t, H <- diag(d) H + b_t a^T + k_t v_t^T.
///
/// Two passes over the state per token. When a call reads and writes one slot of one state
/// view (decode_step, an in-place pool) with unit stride along V, the passes run in the
/// caller's memory: no copy of the state in or out.
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "../../core/family.hpp"
#include "../../core/tensor_view.hpp"
#include "../io/checkpoint_io.hpp"
#include "../io/token_io.hpp"
#include "../linalg/eigen_types.hpp"
#include "rule_coefficients.hpp"
#include "safe_coefficients.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class token_worker {
 public:
  using inputs_t = typename Rule::template inputs<T>;
  using scalar = T;        // input and output elements
  using state_scalar = A;  // state and accumulation
  static constexpr bool corrects = std::is_same_v<typename Rule::family, householder_family>;
  static constexpr bool low_rank = std::is_same_v<typename Rule::family, dplr_family>;  // RWKV-7

  /// The vectors share one allocation: a decode step builds a worker per thread slot per call,
  /// and a dozen aligned allocations and frees cost it more than a small head's arithmetic.
  token_worker(index_t K, index_t V)
      : K_(K), V_(V), buffer_(6 * padded(K) + 3 * padded(V)), q_(key_vector(0), K), k_(key_vector(1), K),
        dq_(key_vector(2), K), dk_(key_vector(3), K), lb_(key_vector(4), low_rank ? K : 0), decay_(key_vector(5), K),
        u_(value_vector(0), V), a_(value_vector(1), V), o_(value_vector(2), V),
        gates_(Rule::decay == decay_kind::vector ? std::size_t(K) : 0) {}
  token_worker(token_worker&&) = default;  // the vectors' memory moves with buffer_
  token_worker(const token_worker&) = delete;
  token_worker& operator=(const token_worker&) = delete;
  token_worker& operator=(token_worker&&) = delete;

  /// Runs tokens [t0, t0 + n) of batch row b, value head hv (q/k head hq) of sequence seq,
  /// reading the state from slot `slot` of s_in and writing it to slot `slot` of s_out
  /// (either view may be absent or alias the other; slot < 0: zero start, nothing written)
  /// and the checkpoints of the sequence (cp).
  template <class Out, class S0, class S1>
  void run(const inputs_t& in, const Out& out, const S0& s_in, const S1& s_out, index_t slot,
           index_t seq, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale,
           const checkpoint_writer<A>& cp = {}) {
    if (cp.every_token_rows() && n > 0) return run_into_checkpoints(in, out, s_in, s_out, slot, seq, b, t0, n, hq, hv, scale, cp);
    const bool direct = in_place(s_in, s_out, slot);  // the state in the caller's slot
    if (!direct) {
      H_.resize(K_, V_);  // [K, V], only off the in-place path
      load_state(s_in, slot, hv, H_);
    }
    state_map H(direct ? &s_out(slot, hv, 0, 0) : H_.data(), K_, V_, Eigen::OuterStride<>(direct ? s_out.stride(2) : V_));
    for (index_t t = t0; t < t0 + n; ++t) {
      step(in, out, H, H, b, t, hq, hv, scale);
      if (cp.active()) cp.after(seq, hv, t - t0 + 1, n, H);
    }
    if (!direct) store_state(s_out, slot, hv, H_);
  }

 private:
  using state_map = Eigen::Map<mat<A>, Eigen::Unaligned, Eigen::OuterStride<>>;              // [K, V]
  using const_state_map = Eigen::Map<const mat<A>, Eigen::Unaligned, Eigen::OuterStride<>>;  // [K, V]

  template <class S0, class S1>
  static bool in_place(const S0& s_in, const S1& s_out, index_t slot) {
    return slot >= 0 && s_in.given() && s_out.given() &&
           static_cast<const void*>(s_in.data()) == static_cast<const void*>(s_out.data()) &&
           s_in.extents() == s_out.extents() && s_in.strides() == s_out.strides() && s_out.stride(3) == 1;
  }

  /// A checkpoint after every token (verify_drafts): token j reads the state of token j - 1
  /// (for j = 0: the caller's slot, read in place when its rows are unit-stride) and writes
  /// its own straight into checkpoint entry j: no copies of the state in or out.
  template <class Out, class S0, class S1>
  void run_into_checkpoints(const inputs_t& in, const Out& out, const S0& s_in, const S1& s_out,
                            index_t slot, index_t seq, index_t b, index_t t0, index_t n, index_t hq, index_t hv,
                            A scale, const checkpoint_writer<A>& cp) {
    const A* src = nullptr;
    index_t src_ld = V_;
    if (slot >= 0 && s_in.given() && s_in.stride(3) == 1) {
      src = &s_in(slot, hv, 0, 0);
      src_ld = s_in.stride(2);
    } else {
      H_.resize(K_, V_);
      load_state(s_in, slot, hv, H_);
      src = H_.data();
    }
    for (index_t t = t0; t < t0 + n; ++t) {
      A* dst = cp.entry(seq, t - t0, hv);
      state_map D(dst, K_, V_, Eigen::OuterStride<>(cp.row_stride()));
      step(in, out, const_state_map(src, K_, V_, Eigen::OuterStride<>(src_ld)), D, b, t, hq, hv, scale);
      src = dst;
      src_ld = cp.row_stride();
    }
    store_state(s_out, slot, hv, const_state_map(src, K_, V_, Eigen::OuterStride<>(src_ld)));  // the last state
  }

  /// Token t: its output from the state `src` ([K, V]) and the state after it into `dst` (the
  /// same memory, or another buffer).
  template <class Out, class Src>
  void step(const inputs_t& in, const Out& out, const Src& src, state_map& dst, index_t b, index_t t,
            index_t hq, index_t hv, A scale) {
    load_qkv_rows(in, b, t, 1, hq, hv, scale, q_, k_, u_);
    A beta = A(1);
    if constexpr (corrects)  // unit key, value over |k|, beta |k|^2: the same update for any key norm
      beta = normalise_key<A>(k_, u_, [&](double sq) { return Rule::beta(in, b, t, hv, sq); });
    else if constexpr (scales_write<Rule, inputs_t>)  // the write c_t v_t k_t^T
      u_ *= write_coefficient<Rule, A>(in, b, t, hv);
    if constexpr (Rule::decay == decay_kind::scalar) {
      decay_.setConstant(std::exp(static_cast<A>(Rule::log_gate(in, b, t, hv))));
    } else if constexpr (Rule::decay == decay_kind::vector) {
      vector_log_gates<Rule>(in, b, t, hv, K_, gates_.data());
      for (index_t d = 0; d < K_; ++d) decay_(d) = std::exp(static_cast<A>(gates_[std::size_t(d)]));
    }
    if constexpr (low_rank) {  // the low-rank part's read vector a (undecayed) and write vector b
      load_rows(in.a, b, t, hv, 1, dk_, A(1));
      load_rows(in.b, b, t, hv, 1, lb_, A(1));
      dq_ = decay_.cwiseProduct(q_);
    } else if constexpr (Rule::decay == decay_kind::none) {
      dk_ = k_, dq_ = q_;
    } else {
      dk_ = decay_.cwiseProduct(k_), dq_ = decay_.cwiseProduct(q_);
    }
    const A qk = q_.dot(k_);
    A qb = A(0);
    if constexpr (low_rank) qb = q_.dot(lb_);
    index_t j = 0;
    for (; j + column_block <= V_; j += column_block) block_step(src, dst, j, beta, qk, qb);
    if (j < V_) tail_step(src, dst, j, beta, qk, qb);
    store_rows(out, b, t, hv, 1, o_);
  }

  /// Columns per register block: two read accumulators of four 64-byte vectors.
  static constexpr index_t column_block = 4 * 64 / index_t(sizeof(A));
  using block = Eigen::Array<A, 1, column_block>;

  /// Columns [j, j + column_block) of one token (the columns of a state are independent):
  /// read a = (d k)^T H (low rank: a_t^T H) and r = (d q)^T H with both accumulators in
  /// registers over all K rows (each column's sum runs over the rows in order); then
  /// w = beta (v - a) (delta family) or v, o = r + (q.k) w (+ (q.b) a); then write
  /// H <- diag(d) H + k w^T (+ b a^T) while most of the block is still in L1. A rule that
  /// writes v unchanged (no delta correction, no low-rank part) reads and writes each row in
  /// one pass.
  template <class Src>
  void block_step(const Src& src, state_map& dst, index_t j, A beta, A qk, A qb) {
    const A* const s0 = src.data() + j;  // locals: the stores below cannot change them
    A* const d0 = dst.data() + j;
    const index_t lds = src.outerStride(), ldd = dst.outerStride();
    if constexpr (!corrects && !low_rank) {  // what is written does not depend on H: one pass
      const block ub = u_.template segment<column_block>(j).array();
      block aq = block::Zero();
      for (index_t i = 0; i < K_; ++i) {
        const block h = Eigen::Map<const block>(s0 + i * lds);
        aq += dq_(i) * h;
        update_row(Eigen::Map<block>(d0 + i * ldd), h, ub, ub, i);
      }
      o_.template segment<column_block>(j) = (aq + qk * ub).matrix();
      return;
    }
    block ak = block::Zero(), aq = block::Zero();
    for (index_t i = 0; i < K_; ++i) {
      const block h = Eigen::Map<const block>(s0 + i * lds);
      ak += dk_(i) * h;
      aq += dq_(i) * h;
    }
    block ub = u_.template segment<column_block>(j).array();
    if constexpr (corrects) ub = beta * (ub - ak);
    block ob = aq + qk * ub;
    if constexpr (low_rank) ob += qb * ak;
    o_.template segment<column_block>(j) = ob.matrix();
    // The write runs backwards: the rows read last are still in L1 (K rows at a row stride of
    // 512 bytes land in a quarter of L1's sets, more lines than its ways hold).
    for (index_t i = K_ - 1; i >= 0; --i) update_row(Eigen::Map<block>(d0 + i * ldd), Eigen::Map<const block>(s0 + i * lds), ub, ak, i);
  }

  /// block_step for the last V - j (< column_block) columns.
  template <class Src>
  void tail_step(const Src& src, state_map& dst, index_t j, A beta, A qk, A qb) {
    const index_t w = V_ - j;
    auto a = a_.tail(w), o = o_.tail(w), u = u_.tail(w);
    a.setZero();
    o.setZero();
    for (index_t i = 0; i < K_; ++i) {
      a.noalias() += dk_(i) * src.row(i).tail(w);
      o.noalias() += dq_(i) * src.row(i).tail(w);
    }
    if constexpr (corrects) u = beta * (u - a);
    o.noalias() += qk * u;
    if constexpr (low_rank) o.noalias() += qb * a;
    for (index_t i = 0; i < K_; ++i) update_row(dst.row(i).tail(w).array(), src.row(i).tail(w).array(), u.array(), a.array(), i);
  }

  /// Row i of the write: d = diag(d) s + k u (+ b r), s and d the same columns of one row.
  template <class Dst, class S, class U, class R>
  void update_row(Dst&& d, const S& s, const U& u, const R& r, index_t i) const {
    if constexpr (low_rank) d = decay_(i) * s + lb_(i) * r + k_(i) * u;
    else if constexpr (Rule::decay == decay_kind::none) d = s + k_(i) * u;
    else d = decay_(i) * s + k_(i) * u;
  }

  using vector_map = Eigen::Map<row_vec<A>>;

  /// n rounded up to whole 64-byte lines of A.
  static index_t padded(index_t n) {
    constexpr index_t line = std::max<index_t>(1, index_t(64 / sizeof(A)));
    return (n + line - 1) / line * line;
  }
  A* key_vector(index_t i) { return buffer_.data() + i * padded(K_); }
  A* value_vector(index_t i) { return buffer_.data() + 6 * padded(K_) + i * padded(V_); }

  index_t K_, V_;
  row_vec<A> buffer_;               // [6 K' + 3 V'] (' : padded) the memory of the vectors below
  mat<A> H_;                        // [K, V] the state off the in-place path
  vector_map q_, k_, dq_, dk_;      // [K]: q, k and their decayed copies (low rank: dk_ = a)
  vector_map lb_;                   // [K]: the low-rank write vector b (low rank only; else empty)
  vector_map decay_;                // [K]: the decay factor of each key row
  vector_map u_, a_, o_;            // [V]: the value, then what is written; (d k)^T H; the output
  std::vector<double> gates_;       // [K]: the log gates of the token (vector decay only)
};

}  // namespace linattn::cpu
