// SPDX-License-Identifier: MIT
/// \file
/// Backward pass 1 (delta family only), independent for every chunk and value head: the
/// products of the WY/UT representation that the two state passes apply to every column block
/// of the state, in fp32:
///
///   forward:   W = T diag(Gam) K,  U = T V       (U~ = U - W H, the corrected values)   [C, K], [C, V]
///   backward:  Wb = T^T diag(e) K,  dXl = T^T P^T dO  (dX = Wb dH + dXl)                [C, K], [C, V]
///
/// with T = (I + diag(beta) stril(K K^T ⊙ D))^{-1} diag(beta) and P = scale Q K^T ⊙ D (causal).
#pragma once

#include "../../tile/block_gemm.cuh"
#include "chunk_factors.cuh"

namespace linattn::cuda::detail {

template <int K, int V>
struct chunk_wy_storage {
  static constexpr int warps = 8, threads = 32 * warps;
  static constexpr int C = backward_chunk, ldk = K + 4, ldv = V + 4, ldc = chunk_corrections::ld;
  float keys[C][ldk];      // [C, K]
  float queries[C][ldk];   // [C, K]  scale q, then diag(Gam) K
  float keys_e[C][ldk];    // [C, K]  diag(e) K
  float values[C][ldv];    // [C, V]
  float dout[C][ldv];      // [C, V]
  float ptdo[C][ldv];      // [C, V]  P^T dO
  float p[C][ldc];         // [C, C]
  chunk_corrections cr;
  chunk_coefficients cf;
  float stage[warps][stage_floats];
};

template <class Rule, class T, int K, int V>
__global__ void __launch_bounds__(256) chunk_wy_kernel(backward_args<Rule, T> args) {
  using S = chunk_wy_storage<K, V>;
  using P = backward_products<T>;
  constexpr int C = S::C;
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& s = *reinterpret_cast<S*>(dynamic_smem);
  const span c = args.chunk_at(blockIdx.x);
  const index_t hv = blockIdx.y, h = hv / args.group, b = c.b, t0 = c.start;
  const int n = c.length;
  float* stage = s.stage[0];

  {
    chunk_rows<K, S::threads, T> kr, qr;
    chunk_rows<V, S::threads, T> vr, dr;
    kr.issue(args.in.k, b, t0, n, h), qr.issue(args.in.q, b, t0, n, h);
    vr.issue(args.in.v, b, t0, n, hv), dr.issue(args.dout, b, t0, n, hv);
    chunk_decays(args, s.cf, b, t0, n, hv);
    kr.store(s.keys[0], S::ldk), qr.store(s.queries[0], S::ldk, args.scale);
    vr.store(s.values[0], S::ldv), dr.store(s.dout[0], S::ldv);
  }
  __syncthreads();
  chunk_betas<K>(args, s.cf, s.keys[0], S::ldk, b, t0, n, hv);
  chunk_scores<P, K>(s.queries[0], s.keys[0], S::ldk, s.cf, s.p[0], stage);
  __syncthreads();
  chunk_inverse<P, K>(s.keys[0], S::ldk, s.cf, s.cr, stage);
  // diag(Gam) K into the queries' tile, diag(e) K beside it
  for (int e = int(threadIdx.x); e < C * K; e += int(blockDim.x)) {
    const int r = e / K, i = e % K;
    s.queries[r][i] = s.cf.gam[r] * s.keys[r][i];
    s.keys_e[r][i] = s.cf.e[r] * s.keys[r][i];
  }
  // P^T dO
  block_gemm<P, col_major, row_major, C, V, C>(s.p[0], S::ldc, s.dout[0], S::ldv, stage,
      [&](int r, int j, const float (&x)[8]) {
#pragma unroll
        for (int e = 0; e < 8; ++e) s.ptdo[r][j + e] = x[e];
      });
  __syncthreads();
  const auto rows_out = [&](const tensor_view<float, 4>& to) {
    return [&, to](int r, int j, const float (&x)[8]) {
      if (r < n) {
        float* d = &to(b, t0 + r, hv, j);
#pragma unroll
        for (int e = 0; e < 8; ++e) d[e] = x[e];
      }
    };
  };
  const float* t = s.cr.t[0];
  block_gemm<P, row_major, row_major, C, K, C, true>(t, S::ldc, s.queries[0], S::ldk, stage, rows_out(args.w_fwd));
  block_gemm<P, row_major, row_major, C, V, C, true>(t, S::ldc, s.values[0], S::ldv, stage, rows_out(args.u_fwd));
  block_gemm<P, col_major, row_major, C, K, C>(t, S::ldc, s.keys_e[0], S::ldk, stage, rows_out(args.w_bwd));
  block_gemm<P, col_major, row_major, C, V, C>(t, S::ldc, s.ptdo[0], S::ldv, stage, rows_out(args.dx_loc));
}

}  // namespace linattn::cuda::detail
