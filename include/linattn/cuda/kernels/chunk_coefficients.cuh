// SPDX-License-Identifier: MIT
/// \file
/// The per-token coefficients of one chunk, shared by the chunk-local kernels: the chunk-local
/// cumsum b of the log gates (docs/math.md#gated-delta-chunkwise) and, for the delta family, the write strengths
/// beta (which need ||k||^2 from the chunk's key tile).
#pragma once

#include "../tile/async_copy.cuh"
#include "../tile/load_store.cuh"
#include "../tile/scalar.cuh"
#include "../tile/warp_sums.cuh"
#include "chunk_args.cuh"
#include "rule_coefficients.cuh"

namespace linattn::cuda::detail {

/// Copies the chunk's key and query tiles [C, ldk] into shared memory and its log gates into
/// gates[0..C) (0 past its n tokens). Runs on the whole block of `Threads`; ends synchronised.
template <int K, int Threads, class Rule, class T>
__device__ void load_keys_queries_gates(const chunk_args<Rule, T>& args, T* keys, T* queries, int ldk, float* gates,
                                        index_t b, index_t t0, int n, index_t h, index_t hv) {
  load_rows<chunk, K, Threads>(keys, ldk, args.in.k, b, t0, n, h);
  load_rows<chunk, K, Threads>(queries, ldk, args.in.q, b, t0, n, h);
  commit_copies();
  const int tid = int(threadIdx.x);
  if (tid < chunk) gates[tid] = tid < n ? log_gate<Rule, T>(args.in, b, t0 + tid, hv) : 0.0f;
  wait_copies<0>();
  __syncthreads();
}

/// betas[r] <- beta_r of the chunk's tokens (0 past n) from its key tile [C, ldk] in shared
/// memory (visible to the block; any element type): one warp per row. Delta family only.
template <int K, class Rule, class T, class Key>
__device__ void chunk_write_strengths(const chunk_args<Rule, T>& args, const Key* keys, int ldk, float* betas, index_t b,
                                      index_t t0, int n, index_t hv) {
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32, warps = int(blockDim.x) / 32;
  for (int r = warp; r < chunk; r += warps) {
    float kk = 0.0f;
    for (int i = lane; i < K; i += 32) {
      const float v = to_float(keys[r * ldk + i]);
      kk += v * v;
    }
    kk = warp_sum(kk);
    if (lane == 0) betas[r] = r < n ? write_strength<Rule, T>(args.in, b, t0 + r, hv, kk) : 0.0f;
  }
}

/// With gates[0..C) holding the chunk's log gates (0 past its n tokens) and `keys` its key
/// tile [C, ldk] in shared memory (both visible to the block): gates <- their cumsum,
/// betas[r] <- beta_r (0 past n; delta family only), and the cumsum is written to
/// args.gate_cumsum for chunk i of the chunk table (all C entries). Runs on the whole block (at least 2 warps); ends synchronised.
template <int K, class Rule, class T>
__device__ void chunk_gates_and_betas(const chunk_args<Rule, T>& args, const T* keys, int ldk, float* gates,
                                      float* betas, int i, index_t b, index_t t0, int n, index_t hv) {
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32, warps = int(blockDim.x) / 32;
  if constexpr (corrects<Rule>) chunk_write_strengths<K>(args, keys, ldk, betas, b, t0, n, hv);
  if (warp == warps - 1) {  // cumsum on the last warp: two gates per lane, then a warp scan
    const float g0 = gates[2 * lane], g1 = g0 + gates[2 * lane + 1];
    const float run = warp_prefix_sum(g1, lane);
    gates[2 * lane] = run - g1 + g0;
    gates[2 * lane + 1] = run;
  }
  __syncthreads();
  if (tid < chunk) args.gate_cumsum(i, hv, tid) = gates[tid];
}

}  // namespace linattn::cuda::detail
