// SPDX-License-Identifier: MIT
/// \file
/// CPU kernels of recursive least squares (docs/math.md#rls) for one (sequence, value head), with
/// H = S^T ([K, V]) and P ([K, K], symmetric):
///
///   tokens:  Sherman-Morrison per token (recurrent form and decode);
///   chunk:   block Woodbury + Cholesky per chunk of n tokens, b = local cumsum of log gamma,
///              Mm = diag(exp(b)) + K P K^T = L L^T      [n, n] SPD
///              X  = L^{-1} K P,  Z = L^{-1} (V - K H)    [n, K], [n, V]
///              O  = Q H + tril((X Q^T)^T) Z              leading blocks of L factor leading blocks of Mm
///              H += X^T Z;   P <- (P - X^T X) / exp(b_n)
///            (a chunk whose Mm is not numerically SPD falls back to the token recurrence; a chunk
///            runs as blocks that forget at most block_decay_floor, see span);
///   whole:   the parallel form, from the normal equations in information form,
///              G_t = gamma_t G_{t-1} + k_t k_t^T,  C_t = gamma_t C_{t-1} + k_t v_t^T   (G_0 = P_0^{-1}, C_0 = G_0 H_0)
///              o_t = (G_t^{-1} q_t)^T C_t                 one K x K Cholesky per token
///            and H = G^{-1} C, P = G^{-1} at the end.
/// P is symmetrised after every update (docs/math.md#rls, hazards).
#pragma once

#include <cmath>
#include <type_traits>


#include "../../core/tensor_view.hpp"
#include "../linalg/eigen_types.hpp"
#include "../io/token_io.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class rls_worker {
 public:
  using inputs_t = typename Rule::template inputs<T>;
  using state_scalar = A;

  /// Workspace for chunks of up to `capacity` tokens; P starts at I / in.delta without a state.
  rls_worker(const inputs_t& in, index_t capacity, index_t K, index_t V)
      : delta_(in.delta), H_(K, V), P_(K, K), G_(K, K), C_(K, V), Q_(capacity, K), K_(capacity, K), V_(capacity, V),
        KP_(capacity, K), M_(capacity, capacity), Y_(capacity, capacity), O_(capacity, V), b_(capacity), w_(K),
        pk_(K), q_(K), k_(K), e_(V), o_(V), llt_(mat<A>::Identity(1, 1)) {}

  /// Loads (H, P) of sequence (or pool slot) `seq`, value head `hv` from a `[N, HV, K, V + K]`
  /// state, or H = 0, P = I / delta when the view is not given or seq < 0 (no pool slot).
  template <class S>
  void load(const tensor_view<S, 4>& state, index_t seq, index_t hv) {
    load_state(state, seq, hv, H_);  // columns [0, V)
    if (state.given() && seq >= 0) return load_state(state, seq, hv, P_, H_.cols());  // columns [V, V + K)
    P_.setIdentity();
    P_ /= static_cast<A>(delta_);
  }

  template <class S>
  void store(const tensor_view<S, 4>& state, index_t seq, index_t hv) const {
    store_state(state, seq, hv, H_);
    store_state(state, seq, hv, P_, H_.cols());
  }

  /// Sherman-Morrison, token by token: tokens [t0, t0 + n) of batch row b.
  void tokens(const inputs_t& in, const tensor_view<T, 4>& out, index_t b, index_t t0, index_t n, index_t hq,
              index_t hv, A scale) {
    for (index_t t = t0; t < t0 + n; ++t) {
      load_qkv_rows(in, b, t, 1, hq, hv, scale, q_, k_, e_);
      const A gamma = std::exp(static_cast<A>(Rule::log_gate(in, b, t, hv)));
      pk_.noalias() = k_ * P_;  // (P k)^T, P symmetric   [K]
      const A denom = gamma + pk_.dot(k_);
      e_.noalias() -= k_ * H_;  // a-priori error v - S k   [V]
      H_.noalias() += (pk_.transpose() / denom) * e_;
      P_.noalias() -= (pk_.transpose() / denom) * pk_;
      P_ /= gamma;
      symmetrise();
      o_.noalias() = q_ * H_;
      store_rows(out, b, t, hv, 1, o_);
    }
  }

  /// One chunk of the chunkwise form, as blocks over which the forgetting stays above
  /// block_decay_floor: the block update divides P - X^T X by Gam_n, so a block that forgets
  /// a factor f loses about log10(f) digits of P to cancellation (docs/math.md#rls). Blocks
  /// of one token are the token recurrence.
  void span(const inputs_t& in, const tensor_view<T, 4>& out, index_t b, index_t t0, index_t n, index_t hq,
            index_t hv, A scale) {
    for (index_t s = 0; s < n;) {
      A run = 0;
      index_t e = s;
      for (; e < n; ++e) {
        const A g = static_cast<A>(Rule::log_gate(in, b, t0 + e, hv));
        if (e > s && run + g < block_decay_floor) break;
        b_(e - s) = run += g;
      }
      block(in, out, b, t0 + s, e - s, hq, hv, scale);
      s = e;
    }
  }

  /// The parallel form: every output from the normal equations of its prefix, one token at a time.
  static index_t whole_capacity(index_t) { return 1; }
  void whole(const inputs_t& in, const tensor_view<T, 4>& out, index_t b, index_t t0, index_t n, index_t hq,
              index_t hv, A scale) {
    if (n == 0) return;
    llt_.compute(P_);  // G_0 = P_0^{-1}, C_0 = G_0 H_0
    G_.setIdentity();
    llt_.solveInPlace(G_);
    symmetrise(G_);
    C_.noalias() = G_ * H_;
    for (index_t t = t0; t < t0 + n; ++t) {
      load_qkv_rows(in, b, t, 1, hq, hv, scale, q_, k_, e_);
      const A gamma = std::exp(static_cast<A>(Rule::log_gate(in, b, t, hv)));
      G_ *= gamma;
      G_.noalias() += k_.transpose() * k_;
      C_ *= gamma;
      C_.noalias() += k_.transpose() * e_;
      llt_.compute(G_);
      w_ = q_.transpose();  // G_t^{-1} q_t
      llt_.solveInPlace(w_);
      o_.noalias() = w_.transpose() * C_;
      store_rows(out, b, t, hv, 1, o_);
    }
    H_ = llt_.solve(C_);
    P_.setIdentity();
    llt_.solveInPlace(P_);
    symmetrise();
  }

 private:
  /// The least cumulative log forgetting of one Woodbury block: Gam_n >= 1/16 in float keeps
  /// its cancellation to about the token recurrence's, 1e-4 in double to below 1e-12.
  static constexpr A block_decay_floor = std::is_same_v<A, float> ? A(-2.7725887) : A(-9.2103404);

  /// One block of n tokens (block Woodbury + Cholesky), b_ holding its cumulative log gates.
  void block(const inputs_t& in, const tensor_view<T, 4>& out, index_t b, index_t t0, index_t n, index_t hq,
             index_t hv, A scale) {
    load_qkv_rows(in, b, t0, n, hq, hv, scale, Q_, K_, V_);
    const auto Kc = K_.topRows(n);
    auto KP = KP_.topRows(n);  // [n, K] = K P, becomes X = L^{-1} K P
    KP.noalias() = Kc * P_;
    auto M = M_.topLeftCorner(n, n);  // [n, n] = diag(exp(b)) + K P K^T
    M.noalias() = KP * Kc.transpose();
    M.diagonal() += b_.head(n).array().exp().matrix();
    llt_.compute(M);
    if (llt_.info() != Eigen::Success) {
      tokens(in, out, b, t0, n, hq, hv, scale);
      return;
    }
    auto Z = V_.topRows(n);  // [n, V] = L^{-1} (V - K H)
    Z.noalias() -= Kc * H_;
    llt_.matrixL().solveInPlace(Z);
    llt_.matrixL().solveInPlace(KP);
    auto Y = Y_.topLeftCorner(n, n);  // [n, n] = X Q^T; O_r = sum_{i <= r} Y_ir Z_i
    Y.noalias() = KP * Q_.topRows(n).transpose();
    auto O = O_.topRows(n);  // [n, V]
    O.noalias() = Q_.topRows(n) * H_;
    O.noalias() += Y.transpose().template triangularView<Eigen::Lower>() * Z;
    store_rows(out, b, t0, hv, n, O);
    H_.noalias() += KP.transpose() * Z;
    P_.noalias() -= KP.transpose() * KP;
    P_ *= std::exp(-b_(n - 1));
    symmetrise();
  }

  void symmetrise() { symmetrise(P_); }
  static void symmetrise(mat<A>& X) {
    const index_t K = X.rows();
    for (index_t i = 0; i < K; ++i)
      for (index_t j = i + 1; j < K; ++j) X(i, j) = X(j, i) = (X(i, j) + X(j, i)) / A(2);
  }

  double delta_;                // ridge of the initial P (inputs::delta)
  mat<A> H_, P_, G_, C_;        // [K, V], [K, K], [K, K], [K, V]
  mat<A> Q_, K_, V_, KP_;       // [cap, K], [cap, K], [cap, V], [cap, K]
  mat<A> M_, Y_, O_;            // [cap, cap], [cap, cap], [cap, V]
  col_vec<A> b_;                // [cap] local cumsum of log gamma
  col_vec<A> w_;                // [K]
  row_vec<A> pk_, q_, k_, e_, o_;  // [K], [K], [K], [V], [V]
  Eigen::LLT<mat<A>> llt_;  // built from a 1 x 1 factorisation: Eigen leaves info() unset otherwise
};

}  // namespace linattn::cpu
