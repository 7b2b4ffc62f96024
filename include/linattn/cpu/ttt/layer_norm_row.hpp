// SPDX-License-Identifier: MIT
/// \file
/// The TTT inner LayerNorm of one row of compile-time length D, held in vector registers
/// (Eigen packets) from load to store: the same formulas as ttt_layer_norm.hpp
/// (docs/math.md#ttt-inner-model, docs/math.md#ttt-gradient), for the fixed-size dual-form
/// kernel (ttt_mini_batch.hpp). For a pre-norm row
/// z + bias:
///
///   xh = (z + bias - mean) / sd,  sd = sqrt(||z + bias - mean||^2 / D + eps)
///   grad:   g = c (D gx - (1^T gx) 1 - (xh^T gx) xh) / (D sd),  gx = gam ⊙ (gam ⊙ xh + bet - y)
///   output: o = x + gam ⊙ xh + bet
#pragma once

#include <cmath>

#include "../linalg/packet_warnings.hpp"
#include "../linalg/gemm.hpp"

LINATTN_PACKET_WARNINGS_OFF

namespace linattn::cpu {

template <class S, int D>
struct ttt_layer_norm_row {
  using P = typename packet_of<S>::type;
  static constexpr int W = packet_of<S>::size;
  static_assert(D % W == 0, "ttt_layer_norm_row: D must be a multiple of the packet width");
  static constexpr int NP = D / W;

  /// g <- the step-scaled gradient of 1/2 ||LN(z + bias) - y||^2 with respect to z;
  /// gsum += g.   z, bias, y, gam, bet, g, gsum: [D]
  LINATTN_FLATTEN static void grad(const S* z, const S* bias, const S* y, const S* gam, const S* bet, S c, S eps, S* g, S* gsum) {
    using namespace Eigen::internal;
    P xh[NP];
    const S rs = normalise(z, bias, eps, xh);
    P gx[NP];
    unroll<NP>([&](auto j) {
      const P gm = ploadu<P>(gam + j * W);
      gx[j] = pmul(gm, psub(pmadd(gm, xh[j], ploadu<P>(bet + j * W)), ploadu<P>(y + j * W)));
    });
    const S s1 = sum([&](auto j) { return gx[j]; });                    // 1^T gx
    const S s2 = sum([&](auto j) { return pmul(xh[j], gx[j]); });       // xh^T gx
    const P d = pset1<P>(S(D)), f = pset1<P>(c * rs / S(D)), p1 = pset1<P>(s1), p2 = pset1<P>(s2);
    unroll<NP>([&](auto j) {
      const P gj = pmul(psub(psub(pmul(d, gx[j]), p1), pmul(p2, xh[j])), f);
      pstoreu(g + j * W, gj);
      pstoreu(gsum + j * W, padd(ploadu<P>(gsum + j * W), gj));
    });
  }

  /// o <- x + LN(z + bias).   z, bias, x, gam, bet, o: [D]
  LINATTN_FLATTEN static void output(const S* z, const S* bias, const S* x, const S* gam, const S* bet, S eps, S* o) {
    using namespace Eigen::internal;
    P xh[NP];
    normalise(z, bias, eps, xh);
    unroll<NP>([&](auto j) {
      const P ln = pmadd(ploadu<P>(gam + j * W), xh[j], ploadu<P>(bet + j * W));
      pstoreu(o + j * W, padd(ploadu<P>(x + j * W), ln));
    });
  }

 private:
  /// The sum of the entries of f(0) + ... + f(NP - 1) (packets).
  template <class F>
  static EIGEN_ALWAYS_INLINE S sum(F&& f) {
    using namespace Eigen::internal;
    P acc = f(std::integral_constant<int, 0>{});
    unroll<NP - 1>([&](auto j) { acc = padd(acc, f(std::integral_constant<int, j + 1>{})); });
    return predux(acc);
  }

  /// xh <- the normalised row z + bias; returns 1 / sd.
  static EIGEN_ALWAYS_INLINE S normalise(const S* z, const S* bias, S eps, P (&xh)[NP]) {
    using namespace Eigen::internal;
    unroll<NP>([&](auto j) { xh[j] = padd(ploadu<P>(z + j * W), ploadu<P>(bias + j * W)); });
    const P mean = pset1<P>(sum([&](auto j) { return xh[j]; }) / S(D));
    unroll<NP>([&](auto j) { xh[j] = psub(xh[j], mean); });
    const S rs = S(1) / std::sqrt(sum([&](auto j) { return pmul(xh[j], xh[j]); }) / S(D) + eps);
    const P prs = pset1<P>(rs);
    unroll<NP>([&](auto j) { xh[j] = pmul(xh[j], prs); });
    return rs;
  }
};

}  // namespace linattn::cpu

LINATTN_PACKET_WARNINGS_ON
