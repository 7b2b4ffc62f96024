// SPDX-License-Identifier: MIT
/// \file
/// Strictly causal per-key decayed scores of one chunk and their backward, the stage the
/// per-key chunk backward runs on (q, k) for the output scores and, for the delta rules, on
/// (k, k) for the Gram matrix. With b the chunk-local log-gate cumsum ([n, K]):
///
///   S_ri  = sum_d R_rd C_id exp(b_rd - b_id)              (i < r)
///   dR_r  = sum_{i < r} dS_ri  C_i ⊙ exp(b_r - b_i)       [n, K]
///   dC_i  = sum_{r > i} dS_ri  R_r ⊙ exp(b_r - b_i)       [n, K]
///
/// Rows go in blocks of 16. Rows of block a against the columns before it go through the pivot
/// e = a0 - 1, exp(b_r - b_i) = exp(b_r - b_e) exp(b_e - b_i), both exponents <= 0, as matrix
/// products. The diagonal block is one product through its last row e = a1 - 1 where its decay
/// span b_a0 - b_e stays within bounded_span in every key dimension (rows times
/// exp(b_r - b_e) <= exp(40), columns times exp(b_e - b_i) >= exp(-40): no overflow, no
/// underflow in float), and elementwise with exponents <= 0 otherwise (strong gates).
#pragma once

#include <algorithm>

#include "../../../core/config.hpp"
#include "../../linalg/eigen_types.hpp"

namespace linattn::cpu {

/// dst.row(j) = exp(p - b.row(first + j)) for j < rows, or exp(b.row(first + j) - p) with
/// `to_pivot` false: row by row, so each exp is a packet expression (exp over Eigen's rowwise
/// broadcast would call std::exp entry by entry).
template <class Dst, class Bm, class P>
void exp_rows(Dst&& dst, const Bm& b, index_t first, index_t rows, const P& p, bool to_pivot = true) {
  for (index_t j = 0; j < rows; ++j) {
    if (to_pivot) dst.row(j) = (p - b.row(first + j)).array().exp().matrix();
    else dst.row(j) = (b.row(first + j) - p).array().exp().matrix();
  }
}

template <class A>
class per_key_scores {
 public:
  static constexpr index_t sub = 16;            // rows per pivot block
  static constexpr double bounded_span = 40.0;  // a diagonal block's largest decay span taken as one product

  per_key_scores(index_t C, index_t K)
      : Rs_(sub, K), Fa_(sub, K), Fc_(sub, K), Cd_(sub, K), Sb_(sub, sub), Ef_(C, K), Cx_(C, K), tmp_(C, K), f_(K) {}

  /// S's strictly lower part of the leading n x n block (the rest untouched).
  void scores(const mat<A>& R, const mat<A>& Cm, const mat<A>& b, index_t n, mat<A>& S) {
    run<true, false>(R, Cm, b, n, &S, nullptr, nullptr, nullptr);
  }

  /// dR and dC (their top n rows, overwritten) from dS's strictly lower part; with `S` also
  /// the scores, as scores() writes them.
  void backward(const mat<A>& R, const mat<A>& Cm, const mat<A>& b, index_t n, const mat<A>& dS, mat<A>& dR,
                mat<A>& dC, mat<A>* S = nullptr) {
    if (S) run<true, true>(R, Cm, b, n, S, &dS, &dR, &dC);
    else run<false, true>(R, Cm, b, n, nullptr, &dS, &dR, &dC);
  }

 private:
  template <bool with_scores, bool with_grads>
  void run(const mat<A>& R, const mat<A>& Cm, const mat<A>& b, index_t n, mat<A>* S, const mat<A>* dS, mat<A>* dR,
           mat<A>* dC) {
    if constexpr (with_grads) dR->topRows(n).setZero(), dC->topRows(n).setZero();
    for (index_t a0 = 0; a0 < n; a0 += sub) {
      const index_t a1 = std::min(a0 + sub, n), ma = a1 - a0;
      if (a0 > 0) {
        const auto be = b.row(a0 - 1);
        auto Fa = Fa_.topRows(ma);  // exp(b_r - b_e)   [ma, K]
        exp_rows(Fa, b, a0, ma, be, false);
        auto Rs = Rs_.topRows(ma);  // R ⊙ Fa
        Rs = R.middleRows(a0, ma).cwiseProduct(Fa);
        auto Ef = Ef_.topRows(a0);  // exp(b_e - b_i)   [a0, K]
        exp_rows(Ef, b, 0, a0, be);
        auto Cx = Cx_.topRows(a0);  // C ⊙ Ef
        Cx = Cm.topRows(a0).cwiseProduct(Ef);
        if constexpr (with_scores) S->block(a0, 0, ma, a0).noalias() = Rs * Cx.transpose();
        if constexpr (with_grads) {
          const auto dSa = dS->block(a0, 0, ma, a0);
          auto tr = tmp_.topRows(ma);
          tr.noalias() = dSa * Cx;
          dR->middleRows(a0, ma) += tr.cwiseProduct(Fa);
          auto tc = tmp_.topRows(a0);
          tc.noalias() = dSa.transpose() * Rs;
          dC->topRows(a0) += tc.cwiseProduct(Ef);
        }
      }
      if (ma > 1 && diagonal_product<with_scores, with_grads>(R, Cm, b, a0, a1, S, dS, dR, dC)) continue;
      for (index_t r = a0 + 1; r < a1; ++r)  // diagonal block, elementwise
        for (index_t i = a0; i < r; ++i) {
          f_ = (b.row(r) - b.row(i)).array().exp().matrix();
          if constexpr (with_scores) (*S)(r, i) = R.row(r).cwiseProduct(Cm.row(i)).dot(f_);
          if constexpr (with_grads) {
            const A d = (*dS)(r, i);
            dR->row(r) += d * Cm.row(i).cwiseProduct(f_);
            dC->row(i) += d * R.row(r).cwiseProduct(f_);
          }
        }
    }
  }

  /// The diagonal block [a0, a1) through its last row e as products (see the file comment);
  /// false, with nothing written, where its span exceeds bounded_span (or is not finite).
  template <bool with_scores, bool with_grads>
  bool diagonal_product(const mat<A>& R, const mat<A>& Cm, const mat<A>& b, index_t a0, index_t a1, mat<A>* S,
                        const mat<A>* dS, mat<A>* dR, mat<A>* dC) {
    const index_t e = a1 - 1, m = a1 - a0;
    if (!((b.row(a0) - b.row(e)).template cast<double>().array() <= bounded_span).all()) return false;  // NaN: false
    auto Fr = Fa_.topRows(m), Fc = Fc_.topRows(m);  // exp(b_r - b_e) >= 1, exp(b_e - b_i) <= 1   [m, K]
    exp_rows(Fr, b, a0, m, b.row(e), false);
    exp_rows(Fc, b, a0, m, b.row(e));
    auto Rd = Rs_.topRows(m), Cd = Cd_.topRows(m);
    Rd = R.middleRows(a0, m).cwiseProduct(Fr);
    Cd = Cm.middleRows(a0, m).cwiseProduct(Fc);
    auto Sb = Sb_.topLeftCorner(m, m);
    if constexpr (with_scores) {
      Sb.noalias() = Rd * Cd.transpose();
      for (index_t r = 1; r < m; ++r) S->row(a0 + r).segment(a0, r) = Sb.row(r).head(r);
    }
    if constexpr (with_grads) {
      Sb = dS->block(a0, a0, m, m).template triangularView<Eigen::StrictlyLower>();
      auto t = tmp_.topRows(m);
      t.noalias() = Sb * Cd;
      dR->middleRows(a0, m) += t.cwiseProduct(Fr);
      t.noalias() = Sb.transpose() * Rd;
      dC->middleRows(a0, m) += t.cwiseProduct(Fc);
    }
    return true;
  }

  mat<A> Rs_, Fa_;        // [sub, K]   pivot-block rows, their factors
  mat<A> Fc_, Cd_;        // [sub, K]   diagonal block: column factors, decayed columns
  mat<A> Sb_;             // [sub, sub] diagonal block: its scores or masked dS
  mat<A> Ef_, Cx_, tmp_;  // [C, K]     column factors, decayed columns, products
  row_vec<A> f_;          // [K]
};

}  // namespace linattn::cpu
