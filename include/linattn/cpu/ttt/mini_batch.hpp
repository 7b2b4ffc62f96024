// SPDX-License-Identifier: MIT
/// \file
/// One whole mini-batch of the TTT-Linear dual form (docs/math.md#ttt-mini-batch) with the head dim
/// D and the mini-batch size MB fixed at compile time (the production D = 64, b = 16), started at a
/// mini-batch boundary (no carried gradient sums). The same equations as ttt_dual.hpp's segment()
/// with p0 = 0, m = MB, as a few register-blocked products (linalg/gemm.hpp) on L1-resident blocks;
/// the LayerNorm runs row by row in registers (ttt_layer_norm_row.hpp) as the epilogue of each
/// register tile of the products it follows:
///
///   Zk = K W_0,  Zq = Q W_0                                         [MB, D]
///   G  = diag(c) LNbwd(Zk + 1 b_0, Y)           (gs = 1^T G)         [MB, D]
///   P  = diag(tau) tril(Q K^T + 1 1^T)   (the mask ⊙ as an epilogue)  [MB, MB]
///   O  = Q + LN(Zq - P G + 1 b_0)                                    [MB, D]
///   W_0 -= tau_MB K^T G,  b_0 -= tau_MB gs
///
/// K^T is formed once (in-register transposes where the target has them) and serves as the
/// B operand of Q K^T and the A operand of K^T G.
#pragma once

#include <algorithm>

#include "../linalg/packet_warnings.hpp"
#include "../linalg/gemm.hpp"
#include "layer_norm_row.hpp"

LINATTN_PACKET_WARNINGS_OFF

namespace linattn::cpu {

/// Operands of one mini-batch (row-major, rows contiguous, leading dimension D).
template <class S>
struct ttt_mini_batch_args {
  const S* q;    // [MB, D] scaled queries
  const S* k;    // [MB, D] keys
  const S* y;    // [MB, D] targets v - k
  const S* c;    // [MB]    steps
  const S* tau;  // [MB]    tau_1..tau_MB
  const S* gam;  // [D]     LayerNorm weight
  const S* bet;  // [D]     LayerNorm bias
  S eps;         //         LayerNorm epsilon
  S* w;          // [D, D]  W_0, updated to the next mini-batch's
  S* b;          // [D]     b_0, likewise
  S* o;          // [MB, D] outputs
  S* ws;         // workspace of ttt_mini_batch<S, D, MB>::workspace elements, prepare()d
};

template <class S, int D, int MB>
struct ttt_mini_batch {
  static constexpr int W = packet_of<S>::size;
  /// Whether this instance can be built for the target (whole packets per row).
  static constexpr bool supported = D % W == 0 && MB % W == 0;
  static constexpr index_t mask_offset = 3 * MB * D + D * MB + MB * MB + D;  // see run()
  static constexpr index_t workspace = mask_offset + MB * MB;

  /// Fills the workspace's constant part (the causal mask scaled by tau_1..tau_MB), once
  /// before the first run() with it.
  static void prepare(S* ws, const S* tau) {
    S* mask = ws + mask_offset;
    for (int r = 0; r < MB; ++r)
      for (int j = 0; j < MB; ++j) mask[r * MB + j] = j <= r ? tau[r] : S(0);
  }

  static void run(const ttt_mini_batch_args<S>& x) {
    S* zk = x.ws;              // [MB, D] K W_0
    S* zq = zk + MB * D;       // [MB, D] Q W_0 (then minus P G)
    S* g = zq + MB * D;        // [MB, D] scaled gradients
    S* kt = g + MB * D;        // [D, MB] K^T
    S* p = kt + D * MB;        // [MB, MB] masked scores
    S* gs = p + MB * MB;       // [D] column sums of G
    const S* mask = gs + D;    // [MB, MB] diag(tau) tril(1 1^T), from prepare() (mask_offset)
    using ln = ttt_layer_norm_row<S, D>;
    constexpr auto mb = fix<MB>;  // compile-time extents
    constexpr auto d = fix<D>;
    std::fill(gs, gs + D, S(0));
    gemm(mb, d, d, strided<S>{x.k, D, 1}, x.w, D, zk, D, {}, [&](index_t i0, index_t n) {  // LN backward per row tile
      for (index_t r = i0; r < i0 + n; ++r)
        ln::grad(zk + r * D, x.b, x.y + r * D, x.gam, x.bet, x.c[r], x.eps, g + r * D, gs);
    });
    gemm(mb, d, d, strided<S>{x.q, D, 1}, x.w, D, zq, D);

    transpose(x.k, kt);
    gemm(mb, mb, d, strided<S>{x.q, D, 1}, kt, MB, p, MB, {}, [&](index_t i0, index_t n) {
      using namespace Eigen::internal;  // P <- M ⊙ (Q K^T + 1 1^T), M = diag(tau) tril(1 1^T)
      using P = typename packet_of<S>::type;
      const P one = pset1<P>(S(1));
      for (index_t r = i0; r < i0 + n; ++r)
        for (int j = 0; j < MB; j += W)
          pstoreu(p + r * MB + j, pmul(ploadu<P>(mask + r * MB + j), padd(ploadu<P>(p + r * MB + j), one)));
    });
    auto ln_output = [&](index_t i0, index_t n) {
      for (index_t r = i0; r < i0 + n; ++r) ln::output(zq + r * D, x.b, x.q + r * D, x.gam, x.bet, x.eps, x.o + r * D);
    };
    gemm<triangle::lower_a>(mb, d, mb, strided<S>{p, MB, 1}, g, D, zq, D, {.alpha = S(-1), .beta = S(1)}, ln_output);

    const S tau_b = x.tau[MB - 1];
    gemm(d, d, mb, strided<S>{kt, MB, 1}, g, D, x.w, D, {.alpha = -tau_b, .beta = S(1)});
    for (int j = 0; j < D; ++j) x.b[j] -= tau_b * gs[j];
  }

 private:
  /// kt <- k^T.   k: [MB, D], kt: [D, MB]
  static void transpose(const S* k, S* kt) {
    using P = typename packet_of<S>::type;
    using block = Eigen::internal::PacketBlock<P, W>;
    if constexpr (requires(block& blk) { Eigen::internal::ptranspose(blk); }) {
      for (int i = 0; i < MB; i += W)
        for (int j = 0; j < D; j += W) {
          block blk;
          unroll<W>([&](auto r) { blk.packet[r] = Eigen::internal::ploadu<P>(k + (i + r) * D + j); });
          Eigen::internal::ptranspose(blk);
          unroll<W>([&](auto r) { Eigen::internal::pstoreu(kt + (j + r) * MB + i, blk.packet[r]); });
        }
    } else {
      for (int i = 0; i < MB; ++i)
        for (int j = 0; j < D; ++j) kt[j * MB + i] = k[i * D + j];
    }
  }
};

}  // namespace linattn::cpu

LINATTN_PACKET_WARNINGS_ON
