// SPDX-License-Identifier: MIT
/// \file
/// Backward pass 3, the state-gradient recurrence: sequential over the chunks of one sequence
/// in reverse, for one value head and BV value columns, dH (the gradient of the state at the
/// chunk's end, [K, BV]) in fp32 shared memory; it is written to the workspace
/// (`state_grads`) before every chunk, and dL/d(initial state) at the end. Per chunk:
///
///   dX  = Wb dH + dXl                         (delta family; Wb, dXl from pass 1)
///   dH <- Gam_{n-1} dH + [diag(Gam) Q; -diag(Gam) K]^T [dO; dX]   (additive: the Q rows only)
#pragma once

#include "../../tile/block_gemm.cuh"
#include "chunk_factors.cuh"
#include "chunk_states.cuh"

namespace linattn::cuda::detail {

template <int K>
struct chunk_state_grads_storage {
  static constexpr int warps = 8, threads = 32 * warps, BV = backward_state_columns;
  static constexpr int C = backward_chunk, ldk = K + 4, ldb = BV + 4;
  float dh[K][ldb];        // [K, BV]   dH
  float left[2 * C][ldk];  // [2C, K]   [diag(Gam) Q; -diag(Gam) K]
  float right[2 * C][ldb]; // [2C, BV]  [dO; dX]
  float wb[C][ldk];        // [C, K]    Wb (delta family)
  chunk_coefficients cf;
  float stage[warps][stage_floats];
};

template <class Rule, class T, int K>
__global__ void __launch_bounds__(256) chunk_state_grads_kernel(backward_args<Rule, T> args) {
  using S = chunk_state_grads_storage<K>;
  constexpr int C = S::C, BV = S::BV, rows = corrects<Rule> ? 2 * C : C;
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& s = *reinterpret_cast<S*>(dynamic_smem);
  const index_t n_seq = blockIdx.z, hv = blockIdx.y, v0 = index_t(blockIdx.x) * BV, h = hv / args.group;
  const int V = args.in.v.extent(3);
  const span seq = args.template sequence<backward_chunk>(n_seq);
  const index_t b = seq.b;
  const float scale = args.scale;
  float* stage = s.stage[0];
  for (int e = int(threadIdx.x); e < K * BV; e += int(blockDim.x)) {
    const int i = e / BV, j = e % BV;
    s.dh[i][j] = args.ds1.data() ? args.ds1(n_seq, hv, i, v0 + j) : 0.0f;
  }
  const int chunks = (seq.length + C - 1) / C;
  for (int c = chunks - 1; c >= 0; --c) {
    const int t0 = seq.start + c * C, n = min(C, seq.start + seq.length - t0);
    chunk_decays(args, s.cf, b, t0, n, hv);
    __syncthreads();  // dH complete (previous chunk), b visible
    float* grad = args.state_at(args.state_grads, seq.first_chunk + c, hv, K, V);
    for (int e = int(threadIdx.x); e < K * BV; e += int(blockDim.x)) {
      const int i = e / BV, j = e % BV;
      grad[index_t(i) * V + v0 + j] = s.dh[i][j];
    }
    for (int e = int(threadIdx.x); e < C * K; e += int(blockDim.x)) {
      const int r = e / K, i = e % K;
      const bool in = r < n;
      s.left[r][i] = in ? s.cf.gam[r] * scale * to_float(args.in.q(b, t0 + r, h, i)) : 0.0f;
      if constexpr (corrects<Rule>) {
        s.left[C + r][i] = in ? -s.cf.gam[r] * to_float(args.in.k(b, t0 + r, h, i)) : 0.0f;
        s.wb[r][i] = in ? args.w_bwd(b, t0 + r, hv, i) : 0.0f;
      }
    }
    for (int e = int(threadIdx.x); e < C * BV; e += int(blockDim.x)) {
      const int r = e / BV, j = e % BV;
      const bool in = r < n;
      s.right[r][j] = in ? to_float(args.dout(b, t0 + r, hv, v0 + j)) : 0.0f;
      if constexpr (corrects<Rule>) s.right[C + r][j] = in ? args.dx_loc(b, t0 + r, hv, v0 + j) : 0.0f;
    }
    __syncthreads();
    if constexpr (corrects<Rule>) {
      block_gemm<float, row_major, row_major, C, BV, K>(s.wb[0], S::ldk, s.dh[0], S::ldb, stage,
          [&](int r, int j, const float (&x)[8]) {
#pragma unroll
            for (int e = 0; e < 8; ++e) s.right[C + r][j + e] += x[e];
          });
      __syncthreads();
    }
    const float decay = s.cf.gam[C - 1];
    block_gemm<float, col_major, row_major, K, BV, rows>(s.left[0], S::ldk, s.right[0], S::ldb, stage,
        [&](int i, int j, const float (&x)[8]) {
#pragma unroll
          for (int e = 0; e < 8; ++e) s.dh[i][j + e] = decay * s.dh[i][j + e] + x[e];
        });
    __syncthreads();
  }
  if (args.ds0.data())
    for (int e = int(threadIdx.x); e < K * BV; e += int(blockDim.x)) {
      const int i = e / BV, j = e % BV;
      args.ds0(n_seq, hv, i, v0 + j) = s.dh[i][j];
    }
}

}  // namespace linattn::cuda::detail
