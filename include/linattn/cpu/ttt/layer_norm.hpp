// SPDX-License-Identifier: MIT
/// \file
/// Row-wise LayerNorm of the TTT inner model and its fused backward with the L2 loss
/// (docs/math.md#ttt-inner-model, docs/math.md#ttt-gradient), in the accumulation type A. For
/// a row z (length D):
///
///   xh = (z - mean(z)) / sd,  sd = sqrt(||z - mean(z)||^2 / D + eps)     (biased variance)
///   LN(z) = gam ⊙ xh + bet
///   gx  = gam ⊙ (LN(z) - y)                                  y = v - k: the target of LN
///   g_z = (D gx - (1^T gx) 1 - (xh^T gx) xh) / (D sd)         d/dz of 1/2 ||LN(z) - y||^2
///
/// All functions work on whole row-major blocks (one row per token), vectorised over the
/// block, and allocate nothing.
#pragma once

#include <cmath>


#include "../../core/config.hpp"
#include "../linalg/eigen_types.hpp"

namespace linattn::cpu {

/// Z <- xh for every row of Z; rstd(r) = 1 / sd of row r.   Z: [m, D], rstd: [m]
template <class A>
void ttt_normalise_rows(Eigen::Ref<mat<A>> Z, Eigen::Ref<col_vec<A>> rstd, A eps) {
  const A inv_d = A(1) / static_cast<A>(Z.cols());
  // Row by row: each row is contiguous (row-major) and stays in registers for its three
  // passes; whole-block broadcasts of per-row scalars were slower (bench/README.md).
  for (index_t r = 0; r < Z.rows(); ++r) {
    auto z = Z.row(r);
    z.array() -= z.sum() * inv_d;
    const A rs = A(1) / std::sqrt(z.squaredNorm() * inv_d + eps);
    z *= rs;
    rstd(r) = rs;
  }
}

/// G <- g_z for every row, from the normalised rows Xh, their rstd and the targets Y.
/// Xh, Y, G: [m, D] (G may not alias Xh or Y); gam, bet: [1, D]; s1, s2: [m] receive the
/// row sums 1^T gx and xh^T gx.
template <class A>
void ttt_layer_norm_l2_grad(Eigen::Ref<const mat<A>> Xh, Eigen::Ref<const col_vec<A>> rstd,
                            Eigen::Ref<const mat<A>> Y, Eigen::Ref<const row_vec<A>> gam,
                            Eigen::Ref<const row_vec<A>> bet, Eigen::Ref<mat<A>> G, Eigen::Ref<col_vec<A>> s1,
                            Eigen::Ref<col_vec<A>> s2) {
  const A d = static_cast<A>(Xh.cols());
  for (index_t r = 0; r < Xh.rows(); ++r) {  // row by row, as ttt_normalise_rows
    const auto xh = Xh.row(r);
    auto g = G.row(r);
    // gx = gam ⊙ (gam ⊙ xh + bet - y)
    g.array() = ((xh.array() * gam.array() + bet.array()) - Y.row(r).array()) * gam.array();
    s1(r) = g.sum();     // 1^T gx
    s2(r) = xh.dot(g);   // xh^T gx
    g.array() = (d * g.array() - s1(r) - s2(r) * xh.array()) * (rstd(r) / d);
  }
}

/// Y <- X + gam ⊙ Xh + bet for every row: the inner model's output with its residual.
template <class A>
void ttt_layer_norm_residual(Eigen::Ref<const mat<A>> X, Eigen::Ref<const mat<A>> Xh,
                             Eigen::Ref<const row_vec<A>> gam, Eigen::Ref<const row_vec<A>> bet,
                             Eigen::Ref<mat<A>> Y) {
  Y.array() = ((Xh.array().rowwise() * gam.array()).rowwise() + bet.array()) + X.array();
}

}  // namespace linattn::cpu
