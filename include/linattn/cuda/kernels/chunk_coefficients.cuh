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

/// Copies the chunk's key and query tiles [C, ldk] into shared memory, its log gates into
/// gates[0..C) and, for the rules whose beta is an input whatever the key's norm, its betas into
/// betas[0..C) (0 past its n tokens): those loads are in flight with the tiles' copies. Runs on
/// the whole block of `Threads`; ends synchronised.
template <int K, int Threads, class Rule, class T>
__device__ void load_keys_queries_gates(const chunk_args<Rule, T>& args, T* keys, T* queries, int ldk, float* gates,
                                        float* betas, index_t b, index_t t0, int n, index_t h, index_t hv) {
  load_rows<chunk, K, Threads>(keys, ldk, args.in.k, b, t0, n, h);
  load_rows<chunk, K, Threads>(queries, ldk, args.in.q, b, t0, n, h);
  commit_copies();
  const int tid = int(threadIdx.x);
  if (tid < chunk) {
    gates[tid] = tid < n ? log_gate<Rule, T>(args.in, b, t0 + tid, hv) : 0.0f;
    if constexpr (corrects<Rule> && beta_is_input<Rule>)
      betas[tid] = tid < n ? write_strength<Rule, T>(args.in, b, t0 + tid, hv, 0.0f) : 0.0f;  // the norm is unused
  }
  wait_copies<0>();
  __syncthreads();
}

/// betas[r] <- beta_r of the chunk's tokens (0 past n) from its key tile [C, ldk] in shared
/// memory (visible to the block; any element type, rows 16-byte aligned): thread r < C sums
/// ||k_r||^2 over its own row in 16-byte loads (conflict-free with one 16-byte pad per row),
/// then reads its beta, so the chunk's beta loads are in flight together. Delta family only.
template <int K, class Rule, class T, class Key>
__device__ void chunk_write_strengths(const chunk_args<Rule, T>& args, const Key* keys, int ldk, float* betas, index_t b,
                                      index_t t0, int n, index_t hv) {
  constexpr int per_load = 16 / int(sizeof(Key));
  static_assert(K % per_load == 0, "whole 16-byte loads per key row");
  const int r = int(threadIdx.x);
  if (r >= chunk) return;
  if (r >= n) {
    betas[r] = 0.0f;
    return;
  }
  float kk[2] = {};  // two chains
#pragma unroll
  for (int c = 0; c < K; c += per_load) {
    const uint4 raw = *reinterpret_cast<const uint4*>(keys + r * ldk + c);
    const Key* e = reinterpret_cast<const Key*>(&raw);
#pragma unroll
    for (int i = 0; i < per_load; ++i) {
      const float v = to_float(e[i]);
      kk[i % 2] += v * v;
    }
  }
  betas[r] = write_strength<Rule, T>(args.in, b, t0 + r, hv, kk[0] + kk[1]);
}

/// With gates[0..C) holding the chunk's log gates (0 past its n tokens) and `keys` its key
/// tile [C, ldk] in shared memory (both visible to the block): gates <- their cumsum,
/// betas[r] <- beta_r (0 past n; delta family only, where load_keys_queries_gates did not),
/// and the cumsum is written to args.gate_cumsum for chunk i of the chunk table (all C
/// entries). Runs on the whole block (at least 2 warps); ends synchronised.
template <int K, class Rule, class T>
__device__ void chunk_gates_and_betas(const chunk_args<Rule, T>& args, const T* keys, int ldk, float* gates,
                                      float* betas, int i, index_t b, index_t t0, int n, index_t hv) {
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32, warps = int(blockDim.x) / 32;
  if constexpr (corrects<Rule> && !beta_is_input<Rule>)  // else loaded with the tiles
    chunk_write_strengths<K>(args, keys, ldk, betas, b, t0, n, hv);
  if (warp == warps - 1) {  // cumsum on the last warp: two gates per lane, then a warp scan
    const float2 cum = warp_pair_prefix_sums(gates[2 * lane], gates[2 * lane + 1], lane);
    gates[2 * lane] = cum.x;
    gates[2 * lane + 1] = cum.y;
  }
  __syncthreads();
  if (tid < chunk) args.gate_cumsum(i, hv, tid) = gates[tid];
}

}  // namespace linattn::cuda::detail
