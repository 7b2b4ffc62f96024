// SPDX-License-Identifier: MIT
/// \file
/// Backward pass 2, the forward state recurrence again: sequential over the chunks of one
/// sequence, for one value head and BV value columns, the state block H = S^T [K, BV] in fp32
/// shared memory; the state at the start of every chunk is written to the workspace
/// (`states`), which the gradient pass reads. Per chunk:
///
///   U~ = U - W H      (delta family, U and W from pass 1; the additive family writes V)
///   H <- Gam_{n-1} H + (diag(e) K)^T U~
#pragma once

#include "../../tile/block_gemm.cuh"
#include "chunk_factors.cuh"

namespace linattn::cuda::detail {

/// Value columns per block of the state passes.
inline constexpr int backward_state_columns = 32;

template <int K>
struct chunk_states_storage {
  static constexpr int warps = 8, threads = 32 * warps, BV = backward_state_columns;
  static constexpr int C = backward_chunk, ldk = K + 4, ldb = BV + 4;
  float h[K][ldb];        // [K, BV]  H
  float keys_e[C][ldk];   // [C, K]   diag(e) K
  float w[C][ldk];        // [C, K]   W (delta family)
  float u[C][ldb];        // [C, BV]  U, then U~ (or V)
  chunk_coefficients cf;
  float stage[warps][stage_floats];
};

template <class Rule, class T, int K>
__global__ void __launch_bounds__(256) chunk_states_kernel(backward_args<Rule, T> args) {
  using S = chunk_states_storage<K>;
  constexpr int C = S::C, BV = S::BV;
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& s = *reinterpret_cast<S*>(dynamic_smem);
  const index_t n_seq = blockIdx.z, hv = blockIdx.y, v0 = index_t(blockIdx.x) * BV, h = hv / args.group;
  const int V = args.in.v.extent(3);
  const span seq = args.template sequence<backward_chunk>(n_seq);
  const index_t b = seq.b;
  float* stage = s.stage[0];
  for (int e = int(threadIdx.x); e < K * BV; e += int(blockDim.x)) {
    const int i = e / BV, j = e % BV;
    s.h[i][j] = args.s0.data() ? args.s0(n_seq, hv, i, v0 + j) : 0.0f;
  }
  for (int c = 0, t0 = seq.start; t0 < seq.start + seq.length; ++c, t0 += C) {
    const int n = min(C, seq.start + seq.length - t0);
    chunk_decays(args, s.cf, b, t0, n, hv);
    __syncthreads();  // H complete (previous chunk), b visible
    float* start = args.state_at(args.states, seq.first_chunk + c, hv, K, V);
    for (int e = int(threadIdx.x); e < K * BV; e += int(blockDim.x)) {
      const int i = e / BV, j = e % BV;
      start[index_t(i) * V + v0 + j] = s.h[i][j];
    }
    for (int e = int(threadIdx.x); e < C * K; e += int(blockDim.x)) {
      const int r = e / K, i = e % K;
      s.keys_e[r][i] = r < n ? s.cf.e[r] * to_float(args.in.k(b, t0 + r, h, i)) : 0.0f;
    }
    if constexpr (corrects<Rule>) {
      for (int e = int(threadIdx.x); e < C * K; e += int(blockDim.x)) {
        const int r = e / K, i = e % K;
        s.w[r][i] = r < n ? args.w_fwd(b, t0 + r, hv, i) : 0.0f;
      }
      for (int e = int(threadIdx.x); e < C * BV; e += int(blockDim.x)) {
        const int r = e / BV, j = e % BV;
        s.u[r][j] = r < n ? args.u_fwd(b, t0 + r, hv, v0 + j) : 0.0f;
      }
      __syncthreads();
      block_gemm<float, row_major, row_major, C, BV, K>(s.w[0], S::ldk, s.h[0], S::ldb, stage,
          [&](int r, int j, const float (&x)[8]) {
#pragma unroll
            for (int e = 0; e < 8; ++e) s.u[r][j + e] -= x[e];
          });
    } else {
      load_tile<BV>(s.u[0], S::ldb, args.in.v, b, t0, n, hv, 1.0f, v0);
    }
    __syncthreads();
    const float decay = s.cf.gam[C - 1];
    block_gemm<float, col_major, row_major, K, BV, C>(s.keys_e[0], S::ldk, s.u[0], S::ldb, stage,
        [&](int i, int j, const float (&x)[8]) {
#pragma unroll
          for (int e = 0; e < 8; ++e) s.h[i][j + e] = decay * s.h[i][j + e] + x[e];
        });
    __syncthreads();  // the chunk's tiles and coefficients are free again
  }
}

}  // namespace linattn::cuda::detail
