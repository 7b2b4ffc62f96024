// SPDX-License-Identifier: MIT
/// \file
/// The chunkwise backward of the additive rules with a per-key gate (VectorDecay, GLA). Per
/// chunk of n tokens with H0 its start state ([K, V]), b the chunk-local cumsum of the log
/// gates ([n, K]) and Q = scale q:
///
///   forward   P_ri = sum_d Q_rd K_id exp(b_rd - b_id)  (i <= r)
///             O = (Q ⊙ exp(b)) H0 + P V;   H_n = diag(exp(b_n)) H0 + (K ⊙ exp(1 b_n^T - b))^T V
///   backward  dV = P^T dO + (K ⊙ exp(1 b_n^T - b)) dH;       dP = dO V^T (causal)
///             dQ_r = exp(b_r) ⊙ (H0 dO_r) + sum_{i<=r} dP_ri K_i ⊙ exp(b_r - b_i)
///             dK_i = exp(b_n - b_i) ⊙ (dH V_i) + sum_{r>=i} dP_ri Q_r ⊙ exp(b_r - b_i)
///             dH0 = diag(exp(b_n)) dH + (Q ⊙ exp(b))^T dO
///             dg_t = sum_{r >= t} Q_r ⊙ dQinter_r + sum_{i < t} (K_i ⊙ dKstate_i
///                    + K_i ⊙ dKintra_i - Q_i ⊙ dQintra_i) + exp(b_n) ⊙ rowsum(dH ⊙ H0)
///
/// (dQintra, dKintra: the strictly causal parts, i < r.) The intra-chunk sums go by sub-blocks
/// of 16 rows: rows of block a against the keys before it through the pivot e = first row of
/// a minus one, exp(b_r - b_i) = exp(b_r - b_e) exp(b_e - b_i), both exponents <= 0 (a matrix
/// product); inside a diagonal block elementwise. No exponent is ever positive.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "../../../core/backward.hpp"
#include "../../../core/family.hpp"
#include "../../../core/problem.hpp"
#include "../../../core/tensor_view.hpp"
#include "../../io/token_io.hpp"
#include "../../linalg/eigen_types.hpp"
#include "../safe_coefficients.hpp"
#include "chunk_passes.hpp"
#include "gradient_io.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class vector_chunk_backward_worker {
 public:
  using inputs_t = typename Rule::template inputs<T>;
  static_assert(Rule::decay == decay_kind::vector && std::is_same_v<typename Rule::family, additive_family>,
                "vector_chunk_backward_worker: additive rules with a per-key gate");
  static constexpr index_t sub = 16;  // rows per pivot block

  vector_chunk_backward_worker(index_t C, index_t K, index_t V)
      : C_(C), Q_(C, K), K_(C, K), V_(C, V), dO_(C, V), dV_(C, V), b_(C, K), eb_(C, K), ef_(C, K), Kf_(C, K),
        Ef_(C, K), Qs_(sub, K), Fa_(sub, K), dQ_(C, K), dK_(C, K), dQs_(C, K), dKs_(C, K), dKst_(C, K), dg_(C, K),
        P_(C, C), dP_(C, C), Kx_(C, K), tmp_(C, K), f_(K), bn_(K), H_(K, V), dH_(K, V) {}

  template <class Grads>
  void run(const inputs_t& in, const tensor_view<const T, 4>& dout, const Grads& gr, const backward_options<A>& opt,
           const detail::problem& p, index_t seq, index_t hq, index_t hv, bool add) {
    const index_t b = p.batch(seq), t0 = p.start(seq), len = p.length(seq);
    const A scale = static_cast<A>(p.scale);
    chunk_passes<false>(
        opt, seq, hv, len, C_, starts_, H_, dH_,
        [&](mat<A>& H, index_t c0, index_t n) {
          load(in, dout, b, t0 + c0, n, hq, hv, scale, false);
          // H <- diag(exp(b_n)) H + (K ⊙ exp(b_n - b))^T V
          H = ex(bn_).asDiagonal() * H;
          H.noalias() += Kf_.topRows(n).transpose() * V_.topRows(n);
        },
        [&](const mat<A>& H0, index_t c0, index_t n) {
          const index_t t = t0 + c0;
          load(in, dout, b, t, n, hq, hv, scale, true);
          backward(H0, n);
          store_gradient_rows(gr.dq, b, t, hq, n, dQ_, scale, add);
          store_gradient_rows(gr.dk, b, t, hq, n, dK_, A(1), add);
          store_rows(gr.dv, b, t, hv, n, dV_);
          store_rows(gr.dg, b, t, hv, n, dg_);
        });
  }

 private:
  template <class E>
  static auto ex(const Eigen::DenseBase<E>& x) {
    return x.derived().array().exp().matrix();
  }

  /// Keys, values, gate cumsums and the write factors (queries and dO with `full`).
  void load(const inputs_t& in, const tensor_view<const T, 4>& dout, index_t b, index_t t0, index_t n, index_t hq,
            index_t hv, A scale, bool full) {
    const index_t K = K_.cols();
    load_rows(in.k, b, t0, hq, n, K_, A(1));
    load_rows(in.v, b, t0, hv, n, V_, A(1));
    for (index_t d = 0; d < K; ++d) {  // as the forward: floored gates summed in double, one rounding per entry
      double run = 0;
      for (index_t r = 0; r < n; ++r) b_(r, d) = static_cast<A>(run += floored_gate<A>(Rule::log_gate(in, b, t0 + r, hv, d)));
    }
    bn_ = b_.row(n - 1);
    ef_.topRows(n) = ex((-b_.topRows(n)).rowwise() + bn_);
    Kf_.topRows(n) = K_.topRows(n).cwiseProduct(ef_.topRows(n));
    if (!full) return;
    load_rows(in.q, b, t0, hq, n, Q_, scale);
    load_rows(dout, b, t0, hv, n, dO_, A(1));
    eb_.topRows(n) = ex(b_.topRows(n));
  }

  void backward(const mat<A>& H0, index_t n) {
    const auto Q = Q_.topRows(n), K = K_.topRows(n), V = V_.topRows(n), dO = dO_.topRows(n);
    auto P = P_.topLeftCorner(n, n), dP = dP_.topLeftCorner(n, n);
    auto dQ = dQ_.topRows(n), dK = dK_.topRows(n), dQs = dQs_.topRows(n), dKs = dKs_.topRows(n);
    auto dKst = dKst_.topRows(n), dg = dg_.topRows(n);
    // State write: dV = Kf dH, dK_state = exp(b_n - b) ⊙ (V dH^T).
    dV_.topRows(n).noalias() = Kf_.topRows(n) * dH_;
    dKst.noalias() = V * dH_.transpose();
    dKst = dKst.cwiseProduct(ef_.topRows(n));
    // Inter-chunk read: dQ = exp(b) ⊙ (dO H0^T).
    dQ.noalias() = dO * H0.transpose();
    dQ = dQ.cwiseProduct(eb_.topRows(n));
    dg = Q.cwiseProduct(dQ);  // per-token terms of the suffix sum
    // Intra-chunk: scores P and the strictly causal gradients dQs, dKs.
    dP.noalias() = dO * V.transpose();
    P.setZero();
    dQs.setZero();
    dKs.setZero();
    for (index_t a0 = 0; a0 < n; a0 += sub) {
      const index_t a1 = std::min(a0 + sub, n), ma = a1 - a0;
      if (a0 > 0) {
        const auto be = b_.row(a0 - 1);
        auto Fa = Fa_.topRows(ma);                 // exp(b_r - b_e)   [ma, K]
        Fa = ex(b_.middleRows(a0, ma).rowwise() - be);
        auto Qs = Qs_.topRows(ma);
        Qs = Q.middleRows(a0, ma).cwiseProduct(Fa);
        auto Ef = Ef_.topRows(a0);                 // exp(b_e - b_i)   [a0, K]
        Ef = ex((-b_.topRows(a0)).rowwise() + be);
        auto Kx = Kx_.topRows(a0);                 // K ⊙ Ef   [a0, K]
        Kx = K.topRows(a0).cwiseProduct(Ef);
        P.block(a0, 0, ma, a0).noalias() = Qs * Kx.transpose();
        const auto dPa = dP.block(a0, 0, ma, a0);
        auto tq = tmp_.topRows(ma);
        tq.noalias() = dPa * Kx;
        dQs.middleRows(a0, ma) += tq.cwiseProduct(Fa);
        auto tk = tmp_.topRows(a0);
        tk.noalias() = dPa.transpose() * Qs;
        dKs.topRows(a0) += tk.cwiseProduct(Ef);
      }
      for (index_t r = a0; r < a1; ++r) {  // diagonal block, elementwise
        P(r, r) = Q.row(r).dot(K.row(r));
        for (index_t i = a0; i < r; ++i) {
          f_ = ex(b_.row(r) - b_.row(i));
          P(r, i) = Q.row(r).cwiseProduct(K.row(i)).dot(f_);
          dQs.row(r) += dP(r, i) * K.row(i).cwiseProduct(f_);
          dKs.row(i) += dP(r, i) * Q.row(r).cwiseProduct(f_);
        }
      }
    }
    dV_.topRows(n).noalias() += P.template triangularView<Eigen::Lower>().transpose() * dO;
    // dg_t = sum_{r >= t} Q_r ⊙ dQinter_r + sum_{i < t} (K ⊙ (dKst + dKs) - Q ⊙ dQs)_i + exp(b_n) ⊙ rowsum(dH ⊙ H0).
    f_ = bn_.array().exp().matrix().cwiseProduct(dH_.cwiseProduct(H0).rowwise().sum().transpose());
    for (index_t r = n - 2; r >= 0; --r) dg.row(r) += dg.row(r + 1);
    row_vec<A> prefix = f_;
    for (index_t t = 0; t < n; ++t) {
      dg.row(t) += prefix;
      prefix += K.row(t).cwiseProduct(dKst.row(t) + dKs.row(t)) - Q.row(t).cwiseProduct(dQs.row(t));
    }
    // Totals: the diagonal terms (exp(0) = 1) join the strictly causal ones.
    dQ += dQs;
    dK = dKst + dKs;
    for (index_t r = 0; r < n; ++r) {
      dQ.row(r) += dP(r, r) * K.row(r);
      dK.row(r) += dP(r, r) * Q.row(r);
    }
    // dH0 = diag(exp(b_n)) dH + (Q ⊙ exp(b))^T dO.
    dH_ = ex(bn_).asDiagonal() * dH_;
    Ef_.topRows(n) = Q.cwiseProduct(eb_.topRows(n));
    dH_.noalias() += Ef_.topRows(n).transpose() * dO;
  }

  index_t C_;
  std::vector<mat<A>> starts_;  // [chunks] chunk-start states   [K, V] each
  mat<A> Q_, K_, V_, dO_, dV_;  // [C, K] / [C, V]   q scaled
  mat<A> b_, eb_, ef_, Kf_;     // [C, K]   cumsum, exp(b), exp(b_n - b), K ⊙ exp(b_n - b)
  mat<A> Ef_, Qs_, Fa_;         // pivot factors: [C, K], [sub, K], [sub, K]
  mat<A> dQ_, dK_, dQs_, dKs_, dKst_, dg_;  // [C, K]
  mat<A> P_, dP_;               // [C, C]
  mat<A> Kx_, tmp_;             // [C, K]   pivot-block scratch
  row_vec<A> f_, bn_;           // [K]
  mat<A> H_, dH_;               // [K, V]
};

}  // namespace linattn::cpu
