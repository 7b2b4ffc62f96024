// SPDX-License-Identifier: MIT
/// \file
/// The chunkwise backward of the rules with a per-key gate: VectorDecay (additive family) and
/// KDA (Householder family, the per-key gated delta rule). Per chunk of n tokens with H0 its
/// start state ([K, V]), b the chunk-local cumsum of the log gates ([n, K]), Gam = exp(b),
/// e = exp(1 b_n^T - b), Q = scale q, and the strictly causal per-key scores of per_key_scores.hpp
/// (P over (Q, K), G over (K, K)), P including its diagonal Q_r . K_r:
///
///   forward   additive:     U = V
///             Householder:  A = diag(beta) G,  M = (I + A)^-1,  X = V - (K ⊙ Gam) H0,
///                           U = M diag(beta) X
///             O = (Q ⊙ Gam) H0 + P U;   H_n = diag(Gam_n) H0 + (K ⊙ e)^T U
///   backward  dU = (K ⊙ e) dH + P^T dO;  dP = dO U^T (causal)
///             dQ = Gam ⊙ (dO H0^T) + [dP through P's scores] + diag(dP) K
///             dK = e ⊙ (U dH^T) + [dP through P's scores] + diag(dP) Q
///             Householder: dY = M^T dU,  dX = diag(beta) dY = dV,  dA = -stril(dY U^T),
///                          dbeta_r = dY_r . X_r + sum_i dA_ri G_ri,
///                          dK += [diag(beta) dA through G's scores, both sides]
///                                - Gam ⊙ (dX H0^T)                              (dK_x)
///             dH0 = diag(Gam_n) dH + (Q ⊙ Gam)^T dO - (K ⊙ Gam)^T dX
///
/// The log-gate gradient per key, as a sum of decayed terms only (docs/backward.md#gate-gradient),
/// with dQs, dKs the strictly causal score gradients of P and dKr, dKc those of G (row and
/// column side):
///
///   dg_t = sum_{r >= t} (Q ⊙ dQinter + K ⊙ dK_x)_r
///          + sum_{i < t} (K ⊙ (dKstate + dKs + dKc) - Q ⊙ dQs - K ⊙ dKr)_i
///          + Gam_n ⊙ rowsum(dH ⊙ H0)
///
/// Two passes per (sequence, value head): the state pass keeps every chunk-start state and, for
/// KDA, each chunk's U, X ([C, V]), M and G ([C, C]); the chunks then go in reverse.
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
#include "../vector_decay_scores.hpp"  // vector_gate_cumsum
#include "chunk_passes.hpp"
#include "gradient_io.hpp"
#include "kept_corrections.hpp"
#include "per_key_scores.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class vector_chunk_backward_worker {
 public:
  using inputs_t = typename Rule::template inputs<T>;
  static constexpr bool corrects = std::is_same_v<typename Rule::family, householder_family>;
  static_assert(Rule::decay == decay_kind::vector, "vector_chunk_backward_worker: rules with a per-key gate");

  vector_chunk_backward_worker(index_t C, index_t K, index_t V)
      : C_(C), scores_(C, K), Q_(C, K), K_(C, K), V_(C, V), dO_(C, V), dU_(C, V), dY_(C, V), b_(C, K), eb_(C, K),
        ef_(C, K), Kf_(C, K), Kg_(C, K), dQ_(C, K), dK_(C, K), dQs_(C, K), dKs_(C, K), dKst_(C, K), dKr_(C, K),
        dKc_(C, K), dg_(C, K), P_(C, C), dP_(C, C), G_(C, C), M_(C, C), beta_(C), sq_(C), dbeta_(C), f_(K), bn_(K),
        H_(K, V), dH_(K, V) {}

  template <class Grads>
  void run(const inputs_t& in, const tensor_view<const T, 4>& dout, const Grads& gr, const backward_options<A>& opt,
           const detail::problem& p, index_t seq, index_t hq, index_t hv, bool add) {
    const index_t b = p.batch(seq), t0 = p.start(seq), len = p.length(seq);
    const A scale = static_cast<A>(p.scale);
    if constexpr (corrects) kept_.reserve(len, V_.cols(), C_);
    chunk_passes<corrects>(
        opt, seq, hv, len, C_, starts_, H_, dH_,
        [&](mat<A>& H, index_t c0, index_t n) {
          load(in, dout, b, t0 + c0, n, hq, hv, scale, false);
          if constexpr (corrects) corrections(H, c0, n);
          // H <- diag(exp(b_n)) H + (K ⊙ exp(b_n - b))^T U
          H = ex(bn_).asDiagonal() * H;
          if constexpr (corrects) H.noalias() += Kf_.topRows(n).transpose() * dU_.topRows(n);
          else H.noalias() += Kf_.topRows(n).transpose() * V_.topRows(n);
        },
        [&](const mat<A>& H0, index_t c0, index_t n) {
          load(in, dout, b, t0 + c0, n, hq, hv, scale, true);
          backward(H0, c0, n);
          store(in, gr, b, t0 + c0, n, hq, hv, scale, add);
        });
  }

 private:
  template <class E>
  static auto ex(const Eigen::DenseBase<E>& x) {
    return x.derived().array().exp().matrix();
  }

  /// Keys, gate cumsums and the write factors, values but in KDA's pass 2 (queries and dO with
  /// `full`); KDA's steps and decayed keys K ⊙ Gam.
  void load(const inputs_t& in, const tensor_view<const T, 4>& dout, index_t b, index_t t0, index_t n, index_t hq,
            index_t hv, A scale, bool full) {
    load_rows(in.k, b, t0, hq, n, K_, A(1));
    if (!full || !corrects) load_rows(in.v, b, t0, hv, n, V_, A(1));  // KDA's pass 2 reads the kept X and U
    vector_gate_cumsum<Rule, A>(in, b, t0, n, hv, b_, gate_scratch_);  // as the forward: floored, summed in double, rounded once
    bn_ = b_.row(n - 1);
    exp_rows(ef_, b_, 0, n, bn_);
    Kf_.topRows(n) = K_.topRows(n).cwiseProduct(ef_.topRows(n));
    if (full || corrects) eb_.topRows(n) = ex(b_.topRows(n));
    if constexpr (corrects) {
      Kg_.topRows(n) = K_.topRows(n).cwiseProduct(eb_.topRows(n));
      for (index_t r = 0; r < n; ++r) {
        sq_(r) = K_.row(r).squaredNorm();
        beta_(r) = Rule::beta(in, b, t0 + r, hv, sq_(r));
      }
    }
    if (!full) return;
    load_rows(in.q, b, t0, hq, n, Q_, scale);
    load_rows(dout, b, t0, hv, n, dO_, A(1));
  }

  /// Pass 1 of KDA: G, M = (I + diag(beta) G)^-1, X = V - (K ⊙ Gam) H0, U = M diag(beta) X
  /// (left in dU_), kept for pass 2.
  void corrections(const mat<A>& H0, index_t c0, index_t n) {
    auto G = G_.topLeftCorner(n, n), M = M_.topLeftCorner(n, n), Am = P_.topLeftCorner(n, n);
    scores_.scores(K_, K_, b_, n, G_);
    G.template triangularView<Eigen::Upper>().setZero();
    Am = beta_.head(n).asDiagonal() * G;
    M.setIdentity();
    unit_lower_solve(Am, M, n);
    auto X = dY_.topRows(n), U = dU_.topRows(n);
    X = V_.topRows(n);
    X.noalias() -= Kg_.topRows(n) * H0;
    Am = M * beta_.head(n).asDiagonal();
    U.noalias() = Am.template triangularView<Eigen::Lower>() * X;
    kept_.keep(c0, n, G, M, X, U);
  }

  /// The chunk's values: U (KDA, kept by pass 1) or V.
  auto values(index_t c0, index_t n) const {
    if constexpr (corrects) return kept_.values(c0, n);
    else return V_.topRows(n);
  }

  /// The chunk's gradients given its start state H0; dH_ (gradient of the chunk-end state)
  /// becomes that of H0.
  void backward(const mat<A>& H0, index_t c0, index_t n) {
    const auto Q = Q_.topRows(n), K = K_.topRows(n), dO = dO_.topRows(n);
    const auto U = values(c0, n);
    auto P = P_.topLeftCorner(n, n), dP = dP_.topLeftCorner(n, n);
    auto dU = dU_.topRows(n), dQ = dQ_.topRows(n), dK = dK_.topRows(n), dKst = dKst_.topRows(n), dg = dg_.topRows(n);
    // State write: dU = (K ⊙ e) dH, dK_state = e ⊙ (U dH^T).
    dU.noalias() = Kf_.topRows(n) * dH_;
    dKst.noalias() = U * dH_.transpose();
    dKst = dKst.cwiseProduct(ef_.topRows(n));
    // Inter-chunk read: dQ = Gam ⊙ (dO H0^T).
    dQ.noalias() = dO * H0.transpose();
    dQ = dQ.cwiseProduct(eb_.topRows(n));
    dg = Q.cwiseProduct(dQ);  // per-token terms of the suffix sum
    // Intra-chunk: scores P (diagonal Q_r . K_r) and the strictly causal gradients dQs, dKs.
    dP.noalias() = dO * U.transpose();
    scores_.backward(Q_, K_, b_, n, dP_, dQs_, dKs_, &P_);
    for (index_t r = 0; r < n; ++r) P(r, r) = Q.row(r).dot(K.row(r));
    dU.noalias() += P.template triangularView<Eigen::Lower>().transpose() * dO;
    if constexpr (corrects) {
      const auto X = kept_.rhs(c0, n), G = kept_.gram(c0, n);
      auto dY = dY_.topRows(n), dA = G_.topLeftCorner(n, n);
      dY.noalias() = kept_.inverse(c0, n).template triangularView<Eigen::Lower>().transpose() * dU;
      dA.noalias() = dY * U.transpose();  // becomes -dA, then dG = diag(beta) dA
      for (index_t r = 0; r < n; ++r) {
        auto a = dA.row(r).head(r);
        a = -a;
        dbeta_(r) = dY.row(r).dot(X.row(r)) + a.dot(G.row(r).head(r));
        a *= beta_(r);
      }
      scores_.backward(K_, K_, b_, n, G_, dKr_, dKc_);
      dU = beta_.head(n).asDiagonal() * dY;  // dX = dV
      // dK starts as dK_x = -Gam ⊙ (dX H0^T), a per-token term of the suffix sum.
      dK.noalias() = dU * H0.transpose();
      dK = -dK.cwiseProduct(eb_.topRows(n));
      dg += K.cwiseProduct(dK);
    }
    // dg_t = suffix sums of the per-token terms + prefix sums of the pair terms + the end term.
    f_ = ex(bn_).cwiseProduct(dH_.cwiseProduct(H0).rowwise().sum().transpose());
    for (index_t r = n - 2; r >= 0; --r) dg.row(r) += dg.row(r + 1);
    row_vec<A> prefix = f_;
    for (index_t t = 0; t < n; ++t) {
      dg.row(t) += prefix;
      prefix += K.row(t).cwiseProduct(dKst.row(t) + dKs_.row(t)) - Q.row(t).cwiseProduct(dQs_.row(t));
      if constexpr (corrects) prefix += K.row(t).cwiseProduct(dKc_.row(t) - dKr_.row(t));
    }
    // Totals: the diagonal score terms (exp(0) = 1) join the strictly causal ones.
    dQ += dQs_.topRows(n);
    if constexpr (corrects) dK += dKst + dKs_.topRows(n) + dKr_.topRows(n) + dKc_.topRows(n);
    else dK = dKst + dKs_.topRows(n);
    for (index_t r = 0; r < n; ++r) {
      dQ.row(r) += dP(r, r) * K.row(r);
      dK.row(r) += dP(r, r) * Q.row(r);
    }
    // dH0 = diag(Gam_n) dH + (Q ⊙ Gam)^T dO (- (K ⊙ Gam)^T dX).
    dH_ = ex(bn_).asDiagonal() * dH_;
    auto Qg = dQs_.topRows(n);  // scratch now
    Qg = Q.cwiseProduct(eb_.topRows(n));
    dH_.noalias() += Qg.transpose() * dO;
    if constexpr (corrects) dH_.noalias() -= Kg_.topRows(n).transpose() * dU;
  }

  template <class Grads>
  void store(const inputs_t& in, const Grads& gr, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale,
             bool add) {
    if constexpr (corrects) store_beta_gradients<Rule>(in, gr, b, t0, hv, n, dbeta_, sq_, dK_, K_);
    store_gradient_rows(gr.dq, b, t0, hq, n, dQ_, scale, add);
    store_gradient_rows(gr.dk, b, t0, hq, n, dK_, A(1), add);
    store_rows(gr.dv, b, t0, hv, n, dU_);  // dV: dU (additive) or dX (KDA)
    store_rows(gr.dg, b, t0, hv, n, dg_);
  }

  index_t C_;
  per_key_scores<A> scores_;
  std::vector<mat<A>> starts_;  // [chunks] chunk-start states   [K, V] each
  kept_corrections<A> kept_;    // the delta rules' U, X, M, G from pass 1 (kept_corrections.hpp)
  mat<A> Q_, K_, V_, dO_, dU_, dY_;        // [C, K] / [C, V]   q scaled; dU_: U (pass 1), dU then dV (pass 2)
  mat<A> b_, eb_, ef_, Kf_, Kg_;           // [C, K]   cumsum, exp(b), exp(b_n - b), K ⊙ ef, K ⊙ eb
  mat<A> dQ_, dK_, dQs_, dKs_, dKst_, dKr_, dKc_, dg_;  // [C, K]
  mat<A> P_, dP_, G_, M_;                  // [C, C]   scores / A, dP, G then dG, M
  col_vec<A> beta_, sq_, dbeta_;           // [C]
  row_vec<A> f_, bn_;                      // [K]
  std::vector<double> gate_scratch_;       // [2K]  vector_gate_cumsum's sums and gates
  mat<A> H_, dH_;                          // [K, V]
};

}  // namespace linattn::cpu
