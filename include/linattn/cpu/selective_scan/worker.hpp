// SPDX-License-Identifier: MIT
/// \file
/// CPU kernels of the selective scan (docs/math.md#mamba) for one (sequence, value head). The
/// state H [K, V] holds h[n, d] (row n: one state index over the V channels), the rates R [K, V]
/// hold A[d, n] in the same layout:
///
///   tokens: per token, per state row n: H[n] <- exp(R[n] ⊙ Delta_t) ⊙ H[n] + B_t[n] u_t,
///           y_t += C_t[n] H[n]                                           (recurrent, decode)
///   span:   a chunk of n tokens read at once (token_block.hpp); per block of `lanes` channels
///           and state row n, the row stays in registers while the chunk's tokens stream past:
///           its decays exp(R[n] ⊙ Delta_t) (exponents <= 0), its writes, its output terms
///           (the chunked scan of the official kernel: chunk by chunk, the state carried)
///   pairs:  every output from every earlier token at once (the T x T form), with the
///           cumulative Delta L_t = sum_{r<=t} Delta_r formed in double:
///             y_t[d] = sum_n C_t[n] (exp(A[d,n] L_t[d]) H0[n,d]
///                      + sum_{s<=t} exp(A[d,n] (L_t[d] - L_s[d])) B_s[n] u_s[d])
/// Every exponent is A times a non-negative sum of Delta: <= 0, so no decay overflows.
#pragma once

#include <algorithm>

#include "../../core/tensor_view.hpp"
#include "../io/token_io.hpp"
#include "../linalg/eigen_types.hpp"
#include "token_block.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class selective_scan_worker : public selective_scan_tokens<Rule, T, A> {
  using base = selective_scan_tokens<Rule, T, A>;
  using base::B_, base::C_, base::delta_, base::u_, base::y_;

 public:
  using inputs_t = typename Rule::template inputs<T>;
  using state_scalar = A;
  /// The span kernel's register block: `rows` state rows x `lanes` channels (4 x 32 floats: 8
  /// AVX-512 registers of state), `rows` independent recurrences per token, and one load and
  /// store of a token's output block per `rows` rows (4 x 32 timed best of {1, 2, 4} x {16, 32}
  /// at V = K = 128 on a busy machine, by a small margin: bench/README.md#mamba).
  static constexpr int lanes = 32;
  static constexpr int rows = 4;

  /// Workspace for spans of up to `capacity` tokens.
  selective_scan_worker(const inputs_t& in, index_t capacity, index_t K, index_t V)
      : base(capacity, K, V), in_(&in), H_(K, V), R_(K, V), L_(capacity, V) {}

  /// Loads the state h of sequence (or pool slot) `seq`, value head hv from a `[N, HV, K, V]`
  /// view (zero when not given or seq < 0), and the head's parameters A and D.
  template <class S>
  void load(const tensor_view<S, 4>& state, index_t seq, index_t hv) {
    load_state(state, seq, hv, H_);
    for (index_t n = 0; n < R_.rows(); ++n)
      for (index_t d = 0; d < R_.cols(); ++d) R_(n, d) = static_cast<A>(Rule::rate(*in_, hv, d, n));
    this->read_skip(*in_, hv);
  }
  template <class S>
  void store(const tensor_view<S, 4>& state, index_t seq, index_t hv) const {
    store_state(state, seq, hv, H_);
  }

  /// Token by token: tokens [t0, t0 + n) of batch row b.
  void tokens(const inputs_t& in, const tensor_view<T, 4>& out, index_t b, index_t t0, index_t n, index_t hq,
              index_t hv, A scale) {
    for (index_t t = t0; t < t0 + n; ++t) {
      this->read(in, b, t, 1, hq, hv, scale);
      const auto delta = delta_.row(0).array();
      const auto u = u_.row(0).array();
      auto y = y_.row(0).array();
      for (index_t r = 0; r < H_.rows(); ++r) {
        auto h = H_.row(r).array();
        h = (R_.row(r).array() * delta).exp() * h + B_(0, r) * u;
        y += C_(0, r) * h;
      }
      this->finish(in, out, b, t, 1, hv);
    }
  }

  /// n tokens from t0 as one chunk of the chunkwise form.
  void span(const inputs_t& in, const tensor_view<T, 4>& out, index_t b, index_t t0, index_t n, index_t hq,
            index_t hv, A scale) {
    if (n == 0) return;
    this->read(in, b, t0, n, hq, hv, scale);
    const index_t K = H_.rows(), V = H_.cols(), full = V - V % lanes, paired = K - K % rows;
    for (index_t r = 0; r < K; r += r < paired ? rows : 1) {
      const bool block = r < paired;
      for (index_t c = 0; c < full; c += lanes) block ? scan_block<lanes, rows>(r, c, lanes, n) : scan_block<lanes, 1>(r, c, lanes, n);
      if (full < V) block ? scan_block<Eigen::Dynamic, rows>(r, full, V - full, n) : scan_block<Eigen::Dynamic, 1>(r, full, V - full, n);
    }
    this->finish(in, out, b, t0, n, hv);
  }

  /// n tokens from t0 by the T x T form (the whole sequence: parallel_forward).
  static index_t whole_capacity(index_t longest) { return std::max<index_t>(1, longest); }
  void whole(const inputs_t& in, const tensor_view<T, 4>& out, index_t b, index_t t0, index_t n, index_t hq,
             index_t hv, A scale) {
    if (n == 0) return;
    this->read(in, b, t0, n, hq, hv, scale);
    const index_t K = H_.rows(), V = H_.cols();
    // L_t = sum_{r<=t} Delta_r per channel, in double from the double Delta.
    for (index_t d = 0; d < V; ++d) {
      double run = 0;
      for (index_t t = 0; t < n; ++t) L_(t, d) = run += Rule::delta(in, b, t0 + t, hv, d);
    }
    const mat<double> R = R_.template cast<double>();
    for (index_t t = 0; t < n; ++t) {
      auto y = y_.row(t).array();
      for (index_t r = 0; r < K; ++r)  // the start state, decayed over tokens 0..t
        y += C_(t, r) * H_.row(r).array() * (R.row(r).array() * L_.row(t).array()).template cast<A>().exp();
      for (index_t s = 0; s <= t; ++s) {
        const Eigen::Array<double, 1, Eigen::Dynamic> gap = L_.row(t).array() - L_.row(s).array();
        for (index_t r = 0; r < K; ++r)
          y += (C_(t, r) * B_(s, r)) * u_.row(s).array() * (R.row(r).array() * gap).template cast<A>().exp();
      }
    }
    // H <- exp(A L_last) ⊙ H0 + sum_s exp(A (L_last - L_s)) ⊙ B_s u_s^T.
    for (index_t r = 0; r < K; ++r) {
      auto h = H_.row(r).array();
      h *= (R.row(r).array() * L_.row(n - 1).array()).template cast<A>().exp();
      for (index_t s = 0; s < n; ++s)
        h += B_(s, r) * u_.row(s).array() *
             (R.row(r).array() * (L_.row(n - 1).array() - L_.row(s).array())).template cast<A>().exp();
    }
    this->finish(in, out, b, t0, n, hv);
  }

 private:
  /// State rows [r, r + R), channels [c, c + w) (w = W when fixed), through the chunk's n
  /// tokens: R W state elements in registers, R independent recurrences per token, and one
  /// load and store of the token's output block per R rows.
  template <int W, int R>
  void scan_block(index_t r, index_t c, index_t w, index_t n) {
    using block = Eigen::Array<A, 1, W, Eigen::RowMajor, 1, lanes>;
    using cblock = Eigen::Map<const block>;
    block h[R], rate[R];
    for (int i = 0; i < R; ++i) {
      rate[i] = R_.row(r + i).segment(c, w).array();
      h[i] = H_.row(r + i).segment(c, w).array();
    }
    for (index_t t = 0; t < n; ++t) {
      const cblock delta(&delta_(t, c), w), u(&u_(t, c), w);
      Eigen::Map<block> y(&y_(t, c), w);
      block acc = y;
      for (int i = 0; i < R; ++i) {
        h[i] = (rate[i] * delta).exp() * h[i] + B_(t, r + i) * u;
        acc += C_(t, r + i) * h[i];
      }
      y = acc;
    }
    for (int i = 0; i < R; ++i) H_.row(r + i).segment(c, w) = h[i].matrix();
  }

  const inputs_t* in_;
  mat<A> H_, R_;    // [K, V]     state h[n, d], rates A[d, n]
  mat<double> L_;   // [cap, V]   cumulative Delta (pairs)
};

}  // namespace linattn::cpu
