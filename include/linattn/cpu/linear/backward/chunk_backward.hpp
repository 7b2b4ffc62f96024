// SPDX-License-Identifier: MIT
/// \file
/// The chunkwise backward of the linear rules without a per-key gate: Hebbian and scalar decay
/// (additive family), Delta, GatedDelta, Longhorn and NLMS (Householder family, the backward
/// of the WY/UT representation). docs/backward.md derives every line; per chunk of n tokens
/// with H0 its start state ([K, V], S^T), b the chunk-local log-gate cumsum, Gam = exp(b),
/// e = exp(b_n - b), D_ri = exp(b_r - b_i) (i <= r), Q = scale q:
///
///   forward   additive:     U = V
///             Householder:  A = stril(diag(beta) (K K^T ⊙ D)),  M = (I + A)^-1,
///                           X = V - diag(Gam) K H0,  U = M diag(beta) X
///             O = diag(Gam) Q H0 + (Q K^T ⊙ D) U;   H_n = Gam_n H0 + (diag(e) K)^T U
///   backward  (dH: gradient of H_n, dO: of the chunk's outputs)
///             dU  = diag(e) K dH + P^T dO,      P = Q K^T ⊙ D (causal)
///             dP  = dO U^T (causal);            dQ = diag(Gam) dO H0^T + (dP ⊙ D) K
///             dK  = diag(e) U dH^T + (dP ⊙ D)^T Q
///             Householder: dY = M^T dU,  dX = diag(beta) dY = dV,  dA = -stril(dY U^T),
///                          dbeta_r = dY_r . X_r + sum_i dA_ri (K K^T ⊙ D)_ri,
///                          dK += (dG + dG^T) K - diag(Gam) dX H0^T,  dG = diag(beta) dA ⊙ D
///             dH0 = Gam_n dH + (diag(Gam) Q)^T dO - (diag(Gam) K)^T dX
///
/// The log-gate gradient is dg_t = <dH'_t, H'_t> (H'_t the decayed state before token t's
/// write), which per chunk is a sum of decayed terms only (docs/backward.md#gate-gradient):
///
///   dg_t = sum_{r >= t} (Q_r . dQinter_r + K_r . dKx_r) + sum_{i < t} (K_i . dKstate_i)
///          + sum_{r >= t > i} (dP ⊙ P + dA ⊙ A)_ri + Gam_n <dH, H0>
///
/// so strong gates give small gradients with small absolute errors (no cancellation of O(1)
/// terms, as a reverse cumsum of q . dq - v . dv over the sequence would have).
///
/// Two passes per (sequence, value head): the chunk-start states forward (ceil(L / C) states
/// of K x V kept), then the chunks in reverse, each recomputing its chunk-local matrices and
/// U from its start state.
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "../../../core/backward.hpp"
#include "../../../core/family.hpp"
#include "../../../core/problem.hpp"
#include "../../../core/tensor_view.hpp"
#include "../../io/token_io.hpp"
#include "../../linalg/eigen_types.hpp"
#include "../../linalg/unit_lower_solve.hpp"
#include "gradient_io.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class chunk_backward_worker {
 public:
  using inputs_t = typename Rule::template inputs<T>;
  static constexpr bool corrects = std::is_same_v<typename Rule::family, householder_family>;
  static constexpr bool gated = Rule::decay == decay_kind::scalar;
  static_assert(Rule::decay != decay_kind::vector, "chunk_backward_worker: per-key gates have their own worker");

  chunk_backward_worker(index_t C, index_t K, index_t V)
      : C_(C), Q_(C, K), K_(C, K), V_(C, V), U_(C, V), X_(C, V), dU_(C, V), R_(2 * C, V), W_(2 * C, K), L_(2 * C, K),
        dQ_(C, K), dK_(C, K), dKs_(C, K), D_(C, C), P_(C, C), dP_(C, C), Z_(C, C), b_(C), gam_(C), e_(C),
        dg_(C), H_(K, V), dH_(K, V) {
    if constexpr (corrects) {
      Gd_.resize(C, C), M_.resize(C, C), T_.resize(C, C), dA_.resize(C, C);
      beta_.resize(C), sq_.resize(C), dbeta_.resize(C), dY_.resize(C, V);
    }
    if constexpr (!gated) D_.setOnes(), gam_.setOnes(), e_.setOnes();
  }

  template <class Grads>
  void run(const inputs_t& in, const tensor_view<const T, 4>& dout, const Grads& gr, const backward_options<A>& opt,
           const detail::problem& p, index_t seq, index_t hq, index_t hv, bool add) {
    const index_t b = p.batch(seq), t0 = p.start(seq), len = p.length(seq), C = C_;
    const index_t chunks = (len + C - 1) / C;
    const A scale = static_cast<A>(p.scale);
    if (starts_.size() < static_cast<std::size_t>(chunks))
      starts_.resize(static_cast<std::size_t>(chunks), mat<A>(H_.rows(), H_.cols()));
    // Pass 1: the state at the start of every chunk.
    load_state(opt.initial_state, seq, hv, H_);
    for (index_t c = 0; c < chunks; ++c) {
      const index_t n = std::min(C, len - c * C);
      starts_[std::size_t(c)] = H_;
      load(in, dout, b, t0 + c * C, n, hq, hv, scale, false);
      if constexpr (corrects) corrections(H_, n);
      advance(H_, n);
    }
    // Pass 2: the chunks in reverse.
    load_state(opt.grad_final_state, seq, hv, dH_);
    for (index_t c = chunks - 1; c >= 0; --c) {
      const index_t n = std::min(C, len - c * C);
      const mat<A>& H0 = starts_[std::size_t(c)];
      load(in, dout, b, t0 + c * C, n, hq, hv, scale, true);
      if constexpr (corrects) corrections(H0, n);
      backward(H0, n);
      store(in, gr, b, t0 + c * C, n, hq, hv, scale, add);
    }
    store_state(opt.grad_initial_state, seq, hv, dH_);
  }

 private:
  /// The chunk's keys, values and gates (and with `full` its queries and output gradients);
  /// the Householder rules' A, M = (I + A)^-1 and T = M diag(beta).
  void load(const inputs_t& in, const tensor_view<const T, 4>& dout, index_t b, index_t t0, index_t n, index_t hq,
            index_t hv, A scale, bool full) {
    load_rows(in.k, b, t0, hq, n, K_, A(1));
    load_rows(in.v, b, t0, hv, n, V_, A(1));
    if (full) {
      load_rows(in.q, b, t0, hq, n, Q_, scale);
      load_rows(dout, b, t0, hv, n, R_, A(1));  // dO: the top rows of R = [dO; dX]
    }
    if constexpr (gated) {
      A run = 0;
      for (index_t r = 0; r < n; ++r) b_(r) = run += static_cast<A>(Rule::log_gate(in, b, t0 + r, hv));
      gam_.head(n) = b_.head(n).array().exp();
      e_.head(n) = (b_(n - 1) - b_.head(n).array()).exp();
      for (index_t r = 0; r < n; ++r) {
        D_.row(r).head(r + 1) = (b_(r) - b_.head(r + 1).array()).exp().transpose();
        D_.row(r).segment(r + 1, n - r - 1).setZero();
      }
    }
    if constexpr (corrects) {
      for (index_t r = 0; r < n; ++r) {
        sq_(r) = K_.row(r).squaredNorm();
        beta_(r) = Rule::beta(in, b, t0 + r, hv, sq_(r));
      }
      auto G = Gd_.topLeftCorner(n, n);
      G.noalias() = K_.topRows(n) * K_.topRows(n).transpose();
      G = G.cwiseProduct(D_.topLeftCorner(n, n));
      G.template triangularView<Eigen::Upper>().setZero();  // strictly lower: K K^T ⊙ D
      auto M = M_.topLeftCorner(n, n);
      T_.topLeftCorner(n, n).noalias() = beta_.head(n).asDiagonal() * G;  // A, for the solve
      M.setIdentity();
      unit_lower_solve(T_, M, n);                                           // M = (I + A)^-1
      T_.topLeftCorner(n, n).noalias() = M * beta_.head(n).asDiagonal();   // T = M diag(beta)
    }
  }

  /// X = V - diag(Gam) K H0 and U = T X (the WY/UT corrections from the chunk-start state).
  void corrections(const mat<A>& H0, index_t n) {
    auto X = X_.topRows(n);
    X.noalias() = K_.topRows(n) * H0;
    X = V_.topRows(n) - gam_.head(n).asDiagonal() * X;
    U_.topRows(n).noalias() = T_.topLeftCorner(n, n).template triangularView<Eigen::Lower>() * X;
  }

  const mat<A>& values() const {
    if constexpr (corrects) return U_;
    else return V_;
  }

  /// H <- Gam_n H + (diag(e) K)^T U.
  void advance(mat<A>& H, index_t n) {
    if (n == 0) return;
    if constexpr (gated) H *= gam_(n - 1);
    dQ_.topRows(n).noalias() = e_.head(n).asDiagonal() * K_.topRows(n);
    H.noalias() += dQ_.topRows(n).transpose() * values().topRows(n);
  }

  /// The chunk's gradients; dH_ (gradient of the chunk-end state) becomes that of H0.
  void backward(const mat<A>& H0, index_t n) {
    const auto Q = Q_.topRows(n), K = K_.topRows(n), U = values().topRows(n);
    const auto dO = R_.topRows(n);
    const auto D = D_.topLeftCorner(n, n);
    auto dU = dU_.topRows(n);
    auto P = P_.topLeftCorner(n, n), dP = dP_.topLeftCorner(n, n);
    auto dK = dK_.topRows(n), dKs = dKs_.topRows(n), dQ = dQ_.topRows(n);
    // State write: dU = diag(e) K dH, dK_state = diag(e) U dH^T.
    W_.topRows(n).noalias() = e_.head(n).asDiagonal() * K;
    dU.noalias() = W_.topRows(n) * dH_;
    dKs.noalias() = U * dH_.transpose();
    dKs = e_.head(n).asDiagonal() * dKs;
    // Intra-chunk scores and their gradients.
    P.noalias() = Q * K.transpose();
    P = P.cwiseProduct(D);
    P.template triangularView<Eigen::StrictlyUpper>().setZero();
    dU.noalias() += P.transpose() * dO;
    dP.noalias() = dO * U.transpose();
    dP.template triangularView<Eigen::StrictlyUpper>().setZero();
    [[maybe_unused]] auto Z = Z_.topLeftCorner(n, n);
    if constexpr (gated) Z = dP.cwiseProduct(P);
    dP = dP.cwiseProduct(D);  // dP ⊙ D
    index_t rows = n;         // rows of R = [dO; dX]
    if constexpr (corrects) {
      auto dY = dY_.topRows(n), X = X_.topRows(n);
      dY.noalias() = M_.topLeftCorner(n, n).template triangularView<Eigen::UnitLower>().transpose() * dU;
      auto dA = dA_.topLeftCorner(n, n);
      dA.noalias() = -(dY * U.transpose());
      dA.template triangularView<Eigen::Upper>().setZero();
      const auto G = Gd_.topLeftCorner(n, n);
      for (index_t r = 0; r < n; ++r) dbeta_(r) = dY.row(r).dot(X.row(r)) + dA.row(r).dot(G.row(r));
      if constexpr (gated) Z += dA.cwiseProduct(beta_.head(n).asDiagonal() * G);  // dA ⊙ A
      // dG + dG^T with dG = diag(beta) dA ⊙ D (G already holds the D factor: use dA ⊙ D).
      dA = beta_.head(n).asDiagonal() * dA.cwiseProduct(D);
      dA += dA.transpose().eval();
      R_.middleRows(n, n).noalias() = beta_.head(n).asDiagonal() * dY;  // dX
      rows = 2 * n;
    }
    // [dO; dX] H0^T: the inter-chunk query gradient and the keys' part through X.
    W_.topRows(rows).noalias() = R_.topRows(rows) * H0.transpose();
    dQ = gam_.head(n).asDiagonal() * W_.topRows(n);
    for (index_t r = 0; r < n; ++r) dg_(r) = Q.row(r).dot(dQ.row(r));  // the inter-chunk read's gate part
    dQ.noalias() += dP * K;
    dK = dKs;
    dK.noalias() += dP.transpose() * Q;
    if constexpr (corrects) {
      auto dKx = W_.middleRows(n, n);
      dKx = -(gam_.head(n).asDiagonal() * dKx);
      for (index_t r = 0; r < n; ++r) dg_(r) += K.row(r).dot(dKx.row(r));
      dK += dKx;
      dK.noalias() += dA_.topLeftCorner(n, n) * K;
    }
    if constexpr (gated) {
      // dg_t = sum_{r >= t} dg_(r) + sum_{i < t} (K_i . dKs_i + colZ_i - rowZ_i) + Gam_n <dH, H0>.
      const A end = gam_(n - 1) * dH_.cwiseProduct(H0).sum();
      A suffix = 0;
      for (index_t r = n - 1; r >= 0; --r) dg_(r) = suffix += dg_(r);
      A prefix = 0;
      for (index_t t = 0; t < n; ++t) {
        dg_(t) += prefix + end;
        prefix += K.row(t).dot(dKs.row(t)) + Z.col(t).tail(n - t - 1).sum() - Z.row(t).head(t).sum();
      }
    }
    // dH0 = Gam_n dH + [diag(Gam) Q; -diag(Gam) K]^T [dO; dX].
    L_.topRows(n) = gam_.head(n).asDiagonal() * Q;
    if constexpr (corrects) L_.middleRows(n, n) = -(gam_.head(n).asDiagonal() * K);
    if constexpr (gated) dH_ *= gam_(n - 1);
    dH_.noalias() += L_.topRows(rows).transpose() * R_.topRows(rows);
    if constexpr (corrects) dU = R_.middleRows(n, n);  // dV = dX
  }

  template <class Grads>
  void store(const inputs_t& in, const Grads& gr, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale,
             bool add) {
    if constexpr (corrects) {
      // beta(input, ||k||^2): d input = dbeta d beta / d input; dk += 2 dbeta (d beta / d ||k||^2) k.
      for (index_t r = 0; r < n; ++r) {
        const beta_partials<A> bp = Rule::beta_derivatives(in, b, t0 + r, hv, sq_(r));
        dK_.row(r) += (A(2) * dbeta_(r) * bp.d_key_sqnorm) * K_.row(r);
        dbeta_(r) *= bp.d_input;
      }
      store_token_gradients(Rule::beta_gradient(gr), b, t0, hv, n, dbeta_);
    }
    store_gradient_rows(gr.dq, b, t0, hq, n, dQ_, scale, add);
    store_gradient_rows(gr.dk, b, t0, hq, n, dK_, A(1), add);
    store_rows(gr.dv, b, t0, hv, n, dU_);
    if constexpr (gated) store_token_gradients(gr.dg, b, t0, hv, n, dg_);
  }

  index_t C_;
  std::vector<mat<A>> starts_;  // [chunks] chunk-start states   [K, V] each
  mat<A> Q_, K_, V_;            // [C, K], [C, K], [C, V]   q scaled
  mat<A> U_, X_, dU_;           // [C, V]                   U (Householder), X, dU (then dV)
  mat<A> R_, W_, L_;            // [2C, V], [2C, K], [2C, K]  [dO; dX], [dO; dX] H0^T, [Gam Q; -Gam K]
  mat<A> dQ_, dK_, dKs_;        // [C, K]
  mat<A> D_, P_, dP_, Z_;       // [C, C]                   decay mask, scores, their gradient, dg terms
  mat<A> Gd_, M_, T_, dA_;      // [C, C]                   K K^T ⊙ D (strict), (I + A)^-1, T, dA
  col_vec<A> b_, gam_, e_, dg_; // [C]
  col_vec<A> beta_, sq_, dbeta_;  // [C]
  mat<A> dY_;                   // [C, V]
  mat<A> H_, dH_;               // [K, V]   state (pass 1), gradient of the current state
};

}  // namespace linattn::cpu
