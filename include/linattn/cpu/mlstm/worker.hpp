// SPDX-License-Identifier: MIT
/// \file
/// CPU kernels of the mLSTM cell (docs/math.md#mlstm) for one (sequence, value head). The state
/// is kept as Z = [C~^T | n~] ([K, V + 1]: the normaliser is the state column of a value that is
/// always 1) and the stabiliser m. With lf = logsigmoid(f~):
///
///   tokens: m' = max(lf_t + m, i~_t); Z <- exp(lf_t + m - m') Z + exp(i~_t - m') k_t [v_t, 1];
///           [num, den] = q_t Z;  h_t = num / max(|den|, exp(-m'))           (recurrent, decode)
///   span:   n tokens from the start state (Z0, m0); b the local cumsum of lf, a_i = i~_i - b_i,
///           M_r = max(m0, max_{i<=r} a_i) (so m_r = b_r + M_r):
///             [Num, Den] = diag(exp(m0 - M)) Q Z0 + (Q K^T ⊙ E) [V, 1],  E_ri = exp(a_i - M_r), i <= r
///             Z <- exp(m0 - M_n) Z0 + (diag(exp(a - M_n)) K)^T [V, 1];   m <- b_n + M_n
///           (chunkwise: chunk by chunk; parallel: the whole sequence as one span).
/// Every exponent is <= 0; b, the a_i, M_r and their differences are formed as double-double sums.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "../../core/tensor_view.hpp"
#include "../io/token_io.hpp"
#include "../linalg/eigen_types.hpp"
#include "../linalg/exact_sum.hpp"
#include "../linalg/gemm.hpp"
#include "../linalg/transpose.hpp"

namespace linattn::cpu {

/// log sigmoid(x) in double, without overflow for either sign.
inline double log_sigmoid(double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }

template <class Rule, class T, class A>
class mlstm_worker {
 public:
  using inputs_t = typename Rule::template inputs<T>;
  using state_scalar = A;

  /// Workspace for spans of up to `capacity` tokens (the inputs are read by the calls).
  mlstm_worker(const inputs_t&, index_t capacity, index_t K, index_t V)
      : Z_(K, V + 1), Q_(capacity, K), Kx_(K, capacity), K_(capacity, K), Vx_(capacity, V + 1), P_(capacity, capacity),
        O_(capacity, V + 1), q_(K), k_(K), o_(V + 1), h_(V), ew_(capacity), a_(std::size_t(capacity)),
        M_(std::size_t(capacity)), m_lo_(std::size_t(capacity)) {}

  /// Loads (Z, m) of sequence (or pool slot) `seq`, value head `hv` from a `[N, HV, K, V + 2]`
  /// state (zero and m = 0 when the view is not given or seq < 0: no pool slot).
  template <class S>
  void load(const tensor_view<S, 4>& state, index_t seq, index_t hv) {
    load_state(state, seq, hv, Z_);  // columns [0, V + 1)
    m_ = state.given() && seq >= 0 ? static_cast<double>(state(seq, hv, 0, Z_.cols())) : 0;
  }

  template <class S>
  void store(const tensor_view<S, 4>& state, index_t seq, index_t hv) const {
    store_state(state, seq, hv, Z_);
    if (!state.given() || seq < 0) return;
    for (index_t i = 0; i < Z_.rows(); ++i) state(seq, hv, i, Z_.cols()) = static_cast<S>(m_);  // m in every row
  }

  /// Token by token: tokens [t0, t0 + n) of batch row b.
  void tokens(const inputs_t& in, const tensor_view<T, 4>& out, index_t b, index_t t0, index_t n, index_t hq,
              index_t hv, A scale) {
    const index_t V = h_.cols();
    for (index_t t = t0; t < t0 + n; ++t) {
      load_qkv_rows(in, b, t, 1, hq, hv, scale, q_, k_, o_.head(V));
      o_(V) = A(1);
      const double lf = forget(in, b, t, hv), ig = input(in, b, t, hv);
      const double m = std::max(lf + m_, ig);
      Z_ *= static_cast<A>(std::exp(lf + m_ - m));
      Z_.noalias() += (static_cast<A>(std::exp(ig - m)) * k_).transpose() * o_;
      m_ = m;
      o_.noalias() = q_ * Z_;
      h_ = o_.head(V) * inverse_normaliser(o_(V), m);
      store_rows(out, b, t, hv, 1, h_);
    }
  }

  /// The parallel form: the whole sequence as one span.
  static index_t whole_capacity(index_t longest) { return std::max<index_t>(1, longest); }
  void whole(const inputs_t& in, const tensor_view<T, 4>& out, auto... a) { span(in, out, a...); }

  /// n tokens from t0 as one span (a chunk of the chunkwise form, or the whole sequence in the
  /// parallel form).
  void span(const inputs_t& in, const tensor_view<T, 4>& out, index_t b, index_t t0, index_t n, index_t hq,
            index_t hv, A scale) {
    if (n == 0) return;
    const index_t V = h_.cols();
    load_qkv_rows(in, b, t0, n, hq, hv, scale, Q_, K_, Vx_.leftCols(V));
    Vx_.col(V).head(n).setOnes();
    transpose_into(Kx_.leftCols(n), K_.topRows(n));
    // b (cumsum of log f), a_i = i~_i - b_i, M_r = max(m0, a_0..a_r), as double-double sums:
    // with forget gates of 0 (log f floored at -1e4) b reaches -1e4 per such token, and a
    // difference a_i - M_r of plain doubles would carry b's rounding (1e-10 after 100 of them).
    exact_sum bs{0, 0}, run{m_, 0};
    for (index_t r = 0; r < n; ++r) {
      bs = bs + exact_sum{forget(in, b, t0 + r, hv), 0};
      const exact_sum a = exact_sum{input(in, b, t0 + r, hv), 0} - bs;
      a_[std::size_t(r)] = a;
      if (run < a) run = a;
      M_[std::size_t(r)] = run;
      m_lo_[std::size_t(r)] = (bs + run).value();  // m_r
    }
    // P = (Q K^T ⊙ E), causal; row r's inter-chunk factor exp(m0 - M_r).
    auto P = P_.topLeftCorner(n, n);
    gemm<triangle::lower_c>(P, rows_of(Q_.topRows(n)), Kx_.leftCols(n));
    const exact_sum m0{m_, 0};
    for (index_t r = 0; r < n; ++r) {
      const exact_sum Mr = M_[std::size_t(r)];
      for (index_t i = 0; i <= r; ++i) P(r, i) *= static_cast<A>(std::exp((a_[std::size_t(i)] - Mr).value()));
      P.row(r).tail(n - r - 1).setZero();
      ew_(r) = static_cast<A>(std::exp((m0 - Mr).value()));
    }
    auto O = O_.topRows(n);  // [n, V + 1]: [Num, Den]
    gemm(O, rows_of(Q_.topRows(n)), Z_, {.row_alpha = ew_.data()});
    gemm<triangle::lower_a>(O, rows_of(P), Vx_.topRows(n), {.beta = A(1)});
    for (index_t r = 0; r < n; ++r) {
      h_ = O.row(r).head(V) * inverse_normaliser(O(r, V), m_lo_[std::size_t(r)]);
      store_rows(out, b, t0 + r, hv, 1, h_);
    }
    // Z <- exp(m0 - M_n) Z0 + (diag(exp(a - M_n)) K)^T [V, 1];  m <- b_n + M_n.
    const exact_sum Mn = M_[std::size_t(n - 1)];
    for (index_t i = 0; i < n; ++i) ew_(i) = static_cast<A>(std::exp((a_[std::size_t(i)] - Mn).value()));
    K_.topRows(n) = ew_.head(n).asDiagonal() * K_.topRows(n);
    gemm(Z_, cols_of(K_.topRows(n)), Vx_.topRows(n), {.beta = static_cast<A>(std::exp((m0 - Mn).value()))});
    m_ = m_lo_[std::size_t(n - 1)];
  }

 private:
  /// log f_t = logsigmoid(f~_t), floored at -1e4: a forget gate of exactly 0 (f~ = -inf) keeps
  /// the span's cumsums finite and their differences exact in double. (Not the linear rules'
  /// gate_floor: here the forget weight is exp(log f + m - m'), and the stabiliser m can be
  /// large; a floor of -1e4 changes a result only where input gates differ by 1e4 in log scale.)
  static double forget(const inputs_t& in, index_t b, index_t t, index_t hv) {
    return std::max(log_sigmoid(static_cast<double>(in.f(b, t, hv))), -1e4);
  }
  static double input(const inputs_t& in, index_t b, index_t t, index_t hv) { return static_cast<double>(in.i(b, t, hv)); }
  /// 1 / max(|den|, exp(-m)), formed in double (exp(-m) may exceed the float range).
  static A inverse_normaliser(A den, double m) {
    return static_cast<A>(1.0 / std::max(std::abs(static_cast<double>(den)), std::exp(-m)));
  }

  mat<A> Z_;            // [K, V + 1]   [C~^T | n~]
  double m_ = 0;        //              stabiliser
  mat<A> Q_, Kx_, K_;   // [cap, K], [K, cap], [cap, K]   q scaled, K^T, keys (then weighted)
  mat<A> Vx_, P_, O_;   // [cap, V + 1], [cap, cap], [cap, V + 1]
  row_vec<A> q_, k_, o_, h_;  // [K], [K], [V + 1], [V]
  col_vec<A> ew_;       // [cap]   row / write factors
  std::vector<exact_sum> a_, M_;  // [cap]   i~ - b, running max
  std::vector<double> m_lo_;     // [cap]   m_r
};

}  // namespace linattn::cpu
