// SPDX-License-Identifier: MIT
/// \file
/// Row-wise LayerNorm of the TTT inner model and its fused backward with the L2 loss
/// (MATH.md §6.1-§6.2), in the accumulation type A. For a row z (length D):
///
///   xh = (z - mean(z)) / sd,  sd = sqrt(||z - mean(z)||^2 / D + eps)     (biased variance)
///   LN(z) = gam ⊙ xh + bet
///   gx  = gam ⊙ (LN(z) - y)                                  y = v - k: the target of LN
///   g_z = (D gx - (1^T gx) 1 - (xh^T gx) xh) / (D sd)         d/dz of 1/2 ||LN(z) - y||^2
///
/// All functions work on the first m rows of row-major blocks and allocate nothing.
#pragma once

#include <cmath>

#include <Eigen/Core>

#include "../core/config.hpp"
#include "eigen_types.hpp"

namespace linattn::cpu {

/// Z <- xh row by row (rows [0, m)); rstd(r) = 1 / sd of row r.
template <class A>
void ttt_normalise_rows(Eigen::Ref<mat<A>> Z, Eigen::Ref<col_vec<A>> rstd, index_t m, A eps) {
  const A inv_d = A(1) / static_cast<A>(Z.cols());
  for (index_t r = 0; r < m; ++r) {
    auto z = Z.row(r).array();
    z -= z.sum() * inv_d;
    const A rs = A(1) / std::sqrt(z.square().sum() * inv_d + eps);
    z *= rs;
    rstd(r) = rs;
  }
}

/// G <- g_z for rows [0, m), from the normalised rows Xh, their rstd and the targets Y.
/// gam, bet: [1, D].  Xh, Y, G: [m, D] (G may not alias Xh or Y).
template <class A>
void ttt_layer_norm_l2_grad(Eigen::Ref<const mat<A>> Xh, Eigen::Ref<const col_vec<A>> rstd,
                            Eigen::Ref<const mat<A>> Y, Eigen::Ref<const row_vec<A>> gam,
                            Eigen::Ref<const row_vec<A>> bet, Eigen::Ref<mat<A>> G, index_t m) {
  const A d = static_cast<A>(Xh.cols());
  for (index_t r = 0; r < m; ++r) {
    const auto xh = Xh.row(r).array();
    auto gx = G.row(r).array();
    gx = gam.array() * (gam.array() * xh + bet.array() - Y.row(r).array());
    const A s1 = gx.sum();
    const A s2 = (xh * gx).sum();
    gx = (d * gx - s1 - s2 * xh) * (rstd(r) / d);
  }
}

/// Y <- X + gam ⊙ Xh + bet for rows [0, m): the inner model's output with its residual.
template <class A>
void ttt_layer_norm_residual(Eigen::Ref<const mat<A>> X, Eigen::Ref<const mat<A>> Xh,
                             Eigen::Ref<const row_vec<A>> gam, Eigen::Ref<const row_vec<A>> bet,
                             Eigen::Ref<mat<A>> Y, index_t m) {
  for (index_t r = 0; r < m; ++r)
    Y.row(r).array() = X.row(r).array() + gam.array() * Xh.row(r).array() + bet.array();
}

}  // namespace linattn::cpu
