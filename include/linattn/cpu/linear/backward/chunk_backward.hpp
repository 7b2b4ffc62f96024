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
/// Two passes per (sequence, value head): the state pass forward keeps every chunk-start state
/// (ceil(L / C) states of K x V) and, for the Householder rules, each chunk's U, X ([C, V]) and
/// M, K K^T ⊙ D ([C, C]); the chunks then go in reverse, reloading q, k, dO and the gates.
/// Memory per thread slot: ceil(L / C) K V (+ L (2 V + 2 C) for the Householder rules) values
/// of the state type. Every block product goes through products.hpp.
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
#include "../../linalg/transpose.hpp"
#include "../../linalg/unit_lower_solve.hpp"
#include "../safe_coefficients.hpp"
#include "chunk_passes.hpp"
#include "gradient_io.hpp"
#include "kept_corrections.hpp"
#include "products.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class chunk_backward_worker {
 public:
  using inputs_t = typename Rule::template inputs<T>;
  static constexpr bool corrects = std::is_same_v<typename Rule::family, householder_family>;
  static constexpr bool gated = Rule::decay == decay_kind::scalar;
  static_assert(Rule::decay != decay_kind::vector, "chunk_backward_worker: per-key gates have their own worker");

  chunk_backward_worker(index_t C, index_t K, index_t V)
      : C_(C), Q_(C, K), K_(C, K), Kt_(K, C), V_(C, V), Ut_(V, C), R_(2 * C, V), W_(2 * C, K), L_(2 * C, K),
        dU_(C, V), dY_(C, V), dK_(C, K), D_(C, C), P_(C, C), dP_(C, C), Z_(C, C), dA_(C, C), T_(C, C),
        b_(C), gam_(C), e_(C), alpha_(2 * C), dg_(C), w_(C), beta_(C), sq_(C), dbeta_(C), H_(K, V), dH_(K, V),
        H0t_(V, K), dHt_(V, K) {
    D_.setOnes(), gam_.setOnes(), e_.setOnes();
    alpha_.head(C).setOnes(), alpha_.tail(C).setConstant(A(-1));
  }

  template <class Grads>
  void run(const inputs_t& in, const tensor_view<const T, 4>& dout, const Grads& gr, const backward_options<A>& opt,
           const detail::problem& p, index_t seq, index_t hq, index_t hv, bool add) {
    const index_t b = p.batch(seq), t0 = p.start(seq), len = p.length(seq);
    const A scale = static_cast<A>(p.scale);
    if constexpr (corrects) kept_.reserve(len, V_.cols(), C_);
    chunk_passes<true>(
        opt, seq, hv, len, C_, starts_, H_, dH_,
        [&](mat<A>& H, index_t c0, index_t n) {  // pass 1 (and the Householder rules' U, X, M, G)
          load(in, dout, b, t0 + c0, n, hq, hv, scale, false);
          if constexpr (corrects) corrections(H, c0, n);
          advance(H, n);
        },
        [&](const mat<A>& H0, index_t c0, index_t n) {  // pass 2
          load(in, dout, b, t0 + c0, n, hq, hv, scale, true);
          backward(H0, c0, n);
          store(in, gr, b, t0 + c0, n, hq, hv, scale, add);
        });
  }

 private:
  /// The chunk's keys (and K^T), gates and steps; with `full` its queries and dO, else its
  /// values (pass 1, and the additive rules' U = V in pass 2).
  void load(const inputs_t& in, const tensor_view<const T, 4>& dout, index_t b, index_t t0, index_t n, index_t hq,
            index_t hv, A scale, bool full) {
    load_rows(in.k, b, t0, hq, n, K_, A(1));
    transpose_into(Kt_.leftCols(n), K_.topRows(n));
    if (!full || !corrects) load_rows(in.v, b, t0, hv, n, V_, A(1));
    if (full) {
      load_rows(in.q, b, t0, hq, n, Q_, scale);
      load_rows(dout, b, t0, hv, n, R_, A(1));  // dO: the top rows of R = [dO; dX]
    }
    if constexpr (gated) {
      double run = 0;  // as the forward: floored gates summed in double, one rounding per entry
      for (index_t r = 0; r < n; ++r) b_(r) = static_cast<A>(run += floored_gate<A>(Rule::log_gate(in, b, t0 + r, hv)));
      gam_.head(n) = b_.head(n).array().exp();
      e_.head(n) = (b_(n - 1) - b_.head(n).array()).exp();
      alpha_.head(n) = gam_.head(n), alpha_.segment(n, n) = -gam_.head(n);
      if (full || corrects)
        for (index_t r = 0; r < n; ++r) {
          const index_t w = std::min(n, (r + 16) / 16 * 16);  // whole packets up to the diagonal
          D_.row(r).head(w) = (b_(r) - b_.head(w).array()).min(A(0)).exp().transpose();
        }
    } else {
      alpha_.head(n).setOnes(), alpha_.segment(n, n).setConstant(A(-1));
    }
    if constexpr (corrects)
      for (index_t r = 0; r < n; ++r) {
        sq_(r) = K_.row(r).squaredNorm();
        beta_(r) = Rule::beta(in, b, t0 + r, hv, sq_(r));
      }
  }

  /// Pass 1 of the Householder rules: G = stril(K K^T ⊙ D), M = (I + diag(beta) G)^-1,
  /// X = V - diag(Gam) K H0, U = M diag(beta) X, kept for pass 2.
  void corrections(const mat<A>& H0, index_t c0, index_t n) {
    // Computed in the chunk workspaces, then streamed to the kept copies (written once here,
    // read once in pass 2: no read for ownership of their cold lines).
    auto G = dA_.topLeftCorner(n, n), M = dP_.topLeftCorner(n, n);
    product<A>(G, K_.topRows(n), op::none, Kt_.leftCols(n), nullptr, A(0), triangle::lower_c, -1);
    if constexpr (gated) G = G.cwiseProduct(D_.topLeftCorner(n, n));
    G.template triangularView<Eigen::Upper>().setZero();
    auto Am = T_.topLeftCorner(n, n);
    Am = beta_.head(n).asDiagonal() * G;
    M.setIdentity();
    unit_lower_solve(Am, M, n);
    Am = M * beta_.head(n).asDiagonal();  // T = M diag(beta), lower triangular
    auto X = dY_.topRows(n), U = dU_.topRows(n);
    X = V_.topRows(n);
    product<A>(X, K_.topRows(n), op::none, H0, alpha_.data() + n, A(1));  // X -= diag(Gam) K H0
    product<A>(U, Am, op::none, X, nullptr, A(0), triangle::lower_a, 0);
    kept_.keep(c0, n, G, M, X, U);
  }

  /// The chunk's values in pass 1: U (Householder, in dU_ after corrections) or V.
  auto pass1_values(index_t n) const {
    if constexpr (corrects) return dU_.topRows(n);
    else return V_.topRows(n);
  }

  /// The chunk's values: U (Householder, kept by pass 1) or V.
  auto values(index_t c0, index_t n) const {
    if constexpr (corrects) return kept_.values(c0, n);
    else return V_.topRows(n);
  }

  /// H <- Gam_n H + (diag(e) K)^T U (pass 1).
  void advance(mat<A>& H, index_t n) {
    auto Kf = L_.topRows(n);
    Kf = e_.head(n).asDiagonal() * K_.topRows(n);
    product<A>(H, Kf, op::transpose, pass1_values(n), nullptr, gated ? gam_(n - 1) : A(1));
  }

  /// The chunk's gradients given its start state H0; dH_ (gradient of the chunk-end state)
  /// becomes that of H0.
  void backward(const mat<A>& H0, index_t c0, index_t n) {
    const auto Q = Q_.topRows(n), K = K_.topRows(n), dO = R_.topRows(n);
    const auto U = values(c0, n);
    const auto D = D_.topLeftCorner(n, n);
    auto dU = dU_.topRows(n), dK = dK_.topRows(n);
    auto P = P_.topLeftCorner(n, n), dP = dP_.topLeftCorner(n, n);
    [[maybe_unused]] auto Z = Z_.topLeftCorner(n, n);
    const A* e = gated ? e_.data() : nullptr;
    const auto& H0t = H0t_;
    transpose_into(H0t_, H0);
    transpose_into(dHt_, dH_);
    transpose_into(Ut_.leftCols(n), U);
    // State write: dU = diag(e) K dH, dK_state = diag(e) U dH^T.
    product<A>(dU, K, op::none, dH_, e);
    product<A>(dK, U, op::none, dHt_, e);
    for (index_t i = 0; i < n; ++i) w_(i) = K.row(i).dot(dK.row(i));
    // Intra-chunk scores P = Q K^T ⊙ D and dP = dO U^T (causal), Z = dP ⊙ P.
    product<A>(P, Q, op::none, Kt_.leftCols(n), nullptr, A(0), triangle::lower_c, 0);
    product<A>(dP, dO, op::none, Ut_.leftCols(n), nullptr, A(0), triangle::lower_c, 0);
    // Causal masks, the decay, and Z = dP ⊙ P (strictly lower: exp(b_r - b_r) = 1 has no gate
    // gradient), row by row.
    for (index_t r = 0; r < n; ++r) {
      P.row(r).tail(n - r - 1).setZero();
      dP.row(r).tail(n - r - 1).setZero();
      if constexpr (gated) {
        P.row(r).head(r + 1).array() *= D.row(r).head(r + 1).array();
        Z.row(r).head(r).array() = dP.row(r).head(r).array() * P.row(r).head(r).array();
        dP.row(r).head(r + 1).array() *= D.row(r).head(r + 1).array();
      }
    }
    product_lower_transposed<A>(dU, P, dO, A(1));
    index_t rows = n;  // rows of R = [dO; dX]
    if constexpr (corrects) {
      const auto X = kept_.rhs(c0, n), G = kept_.gram(c0, n);
      auto dY = dY_.topRows(n), dA = dA_.topLeftCorner(n, n), dG = T_.topLeftCorner(n, n);
      product_lower_transposed<A>(dY, kept_.inverse(c0, n), dU);  // M^T dU
      product<A>(dA, dY, op::none, Ut_.leftCols(n), nullptr, A(0), triangle::lower_c, -1);  // -dA
      // dA = -stril(dY U^T); dbeta; Z += dA ⊙ A (A = diag(beta) G); dG = diag(beta) (dA ⊙ D),
      // symmetrised: dG + dG^T (the Gram is symmetric), zero diagonal.
      for (index_t r = 0; r < n; ++r) {
        auto a = dA.row(r).head(r);
        a = -a;
        dA.row(r).tail(n - r).setZero();
        dbeta_(r) = dY.row(r).dot(X.row(r)) + a.dot(G.row(r).head(r));
        if constexpr (gated) {
          Z.row(r).head(r).array() += beta_(r) * a.array() * G.row(r).head(r).array();
          a.array() = beta_(r) * a.array() * D.row(r).head(r).array();  // dA becomes dG
        } else {
          a *= beta_(r);
        }
      }
      dG = dA + dA.transpose();  // dA holds dG, strictly lower
      R_.middleRows(n, n) = beta_.head(n).asDiagonal() * dY;  // dX
      rows = 2 * n;
    }
    // [diag(Gam) dO; -diag(Gam) dX] H0^T: the inter-chunk query gradient dQ and dK_x.
    auto W = W_.topRows(rows);
    product<A>(W, R_.topRows(rows), op::none, H0t, gated || corrects ? alpha_.data() : nullptr);
    auto dQ = W_.topRows(n);
    for (index_t r = 0; r < n; ++r) dg_(r) = Q.row(r).dot(dQ.row(r));
    product<A>(dQ, dP, op::none, K, nullptr, A(1), triangle::lower_a, 0);
    product_lower_transposed<A>(dK, dP, Q, A(1));
    if constexpr (corrects) {
      const auto dKx = W_.middleRows(n, n);
      for (index_t r = 0; r < n; ++r) dg_(r) += K.row(r).dot(dKx.row(r));
      dK += dKx;
      product<A>(dK, T_.topLeftCorner(n, n), op::none, K, nullptr, A(1));  // (dG + dG^T) K
    }
    if constexpr (gated) {
      // dg_t = sum_{r >= t} dg_(r) + sum_{i < t} (w_i + colZ_i - rowZ_i) + Gam_n <dH, H0>.
      const A end = gam_(n - 1) * dHt_.cwiseProduct(H0t).sum();
      A suffix = 0;
      for (index_t r = n - 1; r >= 0; --r) dg_(r) = suffix += dg_(r);
      for (index_t r = 0; r < n; ++r) w_(r) -= Z.row(r).head(r).sum();  // strictly lower part only
      for (index_t r = 1; r < n; ++r) w_.head(r) += Z.row(r).head(r).transpose();
      A prefix = end;
      for (index_t t = 0; t < n; ++t) {
        dg_(t) += prefix;
        prefix += w_(t);
      }
    }
    // dH0 = Gam_n dH + [diag(Gam) Q; -diag(Gam) K]^T [dO; dX].
    auto Lm = L_.topRows(rows);
    Lm.topRows(n) = gam_.head(n).asDiagonal() * Q;
    if constexpr (corrects) Lm.bottomRows(n) = -(gam_.head(n).asDiagonal() * K);
    product<A>(dH_, Lm, op::transpose, R_.topRows(rows), nullptr, gated ? gam_(n - 1) : A(1));
  }

  template <class Grads>
  void store(const inputs_t& in, const Grads& gr, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale,
             bool add) {
    if constexpr (corrects) store_beta_gradients<Rule>(in, gr, b, t0, hv, n, dbeta_, sq_, dK_, K_);
    store_gradient_rows(gr.dq, b, t0, hq, n, W_, scale, add);
    store_gradient_rows(gr.dk, b, t0, hq, n, dK_, A(1), add);
    if constexpr (corrects) store_gradient_rows(gr.dv, b, t0, hv, n, R_.middleRows(n, n), A(1), false);  // dV = dX
    else store_gradient_rows(gr.dv, b, t0, hv, n, dU_, A(1), false);
    if constexpr (gated) store_token_gradients(gr.dg, b, t0, hv, n, dg_);
  }

  index_t C_;
  std::vector<mat<A>> starts_;  // [chunks] chunk-start states   [K, V] each
  kept_corrections<A> kept_;    // the delta rules' U, X, M, G from pass 1 (kept_corrections.hpp)
  mat<A> Q_, K_, Kt_, V_, Ut_;  // [C, K], [C, K], [K, C], [C, V], [V, C]   q scaled
  mat<A> R_, W_, L_;            // [2C, V], [2C, K], [2C, K]  [dO; dX], [dQ; dK_x], [Gam Q; -Gam K]
  mat<A> dU_, dY_, dK_;         // [C, V], [C, V], [C, K]
  mat<A> D_, P_, dP_, Z_, dA_, T_;  // [C, C]  decay mask, scores, dP, dg terms, -dA, T (pass 1) / dG + dG^T
  col_vec<A> b_, gam_, e_, alpha_, dg_, w_;  // [C] (alpha: [2C] = [Gam; -Gam])
  col_vec<A> beta_, sq_, dbeta_;             // [C]
  mat<A> H_, dH_, H0t_, dHt_;                // [K, V], [K, V], [V, K], [V, K]
};

}  // namespace linattn::cpu
