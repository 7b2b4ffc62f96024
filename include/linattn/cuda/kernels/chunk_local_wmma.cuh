// SPDX-License-Identifier: MIT
/// \file
/// Chunkwise form, pass 1 for fp32 inputs (docs/math.md#delta-chunkwise step 1 and docs/math.md#gated-delta-chunkwise; 16-bit inputs take
/// chunk_local_mma.cuh): independent for every chunk and value head. With b the chunk-local cumsum of the log gates and Gam_ri = exp(b_r - b_i):
///
///   scores = scale (Q K^T ⊙ Gam)          causal incl. the diagonal      [C, C]
///   A      = stril(diag(beta) (K K^T ⊙ Gam))                             [C, C]
///   T      = (I + A)^{-1} diag(beta)      blocked inversion in fp32      [C, C]
///   W      = T diag(exp b) K,  U = T V                                   [C, K], [C, V]
///
/// The additive family needs only b and the scores. Every exponent is <= 0.
#pragma once

#include <type_traits>

#include "../tile/block_gemm.cuh"
#include "../tile/load_store.cuh"
#include "chunk_args.cuh"
#include "chunk_coefficients.cuh"
#include "rule_coefficients.cuh"
#include "unit_lower_inverse.cuh"

namespace linattn::cuda::detail {

/// Shared memory of the fp32 chunk-local pass, delta family. V [C, V] is loaded once A is
/// inverted: into A's place when it fits (V = 64), else after the rest (the `_v` variant).
template <class T, int K, int V>
struct chunk_local_wmma_storage_delta {
  static constexpr int warps = 16, threads = 32 * warps;
  static constexpr int ldk = K + pad<T>, ldv = V + pad<T>, ldc = chunk + pad<T>, ldf = chunk + 4;
  T keys[chunk][ldk];                // [C, K]
  T queries[chunk][ldk];             // [C, K], then exp(b) K
  float a[chunk][ldf];               // [C, C]  A, then V [C, V] when it fits
  float x[chunk][ldf];               // [C, C]  (I + A)^-1
  T t_op[chunk][ldc];                // [C, C]  T = (I + A)^-1 diag(beta)
  float stage[warps][stage_floats];  // [warps][16, 20]  block_gemm's per-warp tiles
  float gates[chunk];                // [C]  log gates, then b
  float betas[chunk];                // [C]
};

/// ... with V [C, V] after the rest, where it does not fit in A's place (V = 128).
template <class T, int K, int V>
struct chunk_local_wmma_storage_delta_v : chunk_local_wmma_storage_delta<T, K, V> {
  T values[chunk][V + pad<T>];       // [C, V]
};

/// The additive family needs b and the scores only.
template <class T, int K>
struct chunk_local_wmma_storage_additive {
  static constexpr int warps = 16, threads = 32 * warps, ldk = K + pad<T>;
  T keys[chunk][ldk];                // [C, K]
  T queries[chunk][ldk];             // [C, K]
  float stage[warps][stage_floats];  // [warps][16, 20]
  float gates[chunk];                // [C]  log gates, then b
  float betas[chunk];                // [C]  (not used)
};

template <class Rule, class T, int K, int V>
using chunk_local_wmma_storage =
    std::conditional_t<!corrects<Rule>, chunk_local_wmma_storage_additive<T, K>,
                       std::conditional_t<V + pad<T> <= chunk + 4, chunk_local_wmma_storage_delta<T, K, V>,
                                          chunk_local_wmma_storage_delta_v<T, K, V>>>;

/// `Op` is the precision of the block products (tile/block_gemm.cuh): `float` (3xTF32, fp32
/// accuracy) or `single_tf32` (options::precision = tf32). The inverse stays 3xTF32 in both.
template <class Rule, class T, int K, int V, class Op = T>
__global__ void __launch_bounds__(512) chunk_local_wmma_kernel(chunk_args<Rule, T> args) {
  static_assert(std::is_same_v<T, float>, "the WMMA chunk-local pass takes fp32 inputs");
  using S = chunk_local_wmma_storage<Rule, T, K, V>;
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& smem = *reinterpret_cast<S*>(dynamic_smem);
  T* keys = smem.keys[0];
  T* queries = smem.queries[0];
  float* stage = smem.stage[0];
  float* gates = smem.gates;
  float* betas = smem.betas;

  const auto [b, t0, hv, h, n] = args.block_chunk();
  const auto& in = args.in;
  const int tid = int(threadIdx.x);

  load_keys_queries_gates<K, S::threads>(args, keys, queries, S::ldk, gates, betas, b, t0, n, h, hv);

  chunk_gates_and_betas<K>(args, keys, S::ldk, gates, betas, int(blockIdx.x), b, t0, n, hv);

  // scores = scale (Q K^T ⊙ Gam), causal; rows past n are not stored.
  const float scale = args.scale;
  block_gemm<Op, row_major, col_major, chunk, chunk, K, false, true>(queries, S::ldk, keys, S::ldk, stage,
      [&](int r, int j, const float (&x)[8]) {
        if (r >= n) return;
        float y[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) y[e] = j + e <= r ? scale * x[e] * __expf(gates[r] - gates[j + e]) : 0.0f;
        store8_aligned(&args.scores(b, t0 + r, hv, j), y);
      });
  if constexpr (corrects<Rule>) {
    float* a = smem.a[0];
    float* tri = smem.x[0];
    T* tri_op = smem.t_op[0];
    T* values;
    if constexpr (S::ldv <= S::ldf) values = a;  // V in A's place
    else values = smem.values[0];
    // A = stril(diag(beta) (K K^T ⊙ Gam))
    block_gemm<Op, row_major, col_major, chunk, chunk, K, false, true>(keys, S::ldk, keys, S::ldk, stage,
        [&](int r, int j, const float (&x)[8]) {
#pragma unroll
          for (int e = 0; e < 8; ++e)
            a[r * S::ldf + j + e] = j + e < r ? betas[r] * x[e] * __expf(gates[r] - gates[j + e]) : 0.0f;
        });
    __syncthreads();
    invert_unit_lower_tc(a, S::ldf, tri, S::ldf, stage);  // tri = (I + A)^{-1}; A is free now
    load_rows<chunk, V, S::threads>(values, S::ldv, in.v, b, t0, n, hv);
    commit_copies();
    for (int e = tid; e < chunk * chunk; e += int(blockDim.x)) {  // T = (I + A)^{-1} diag(beta)
      const int r = e / chunk, j = e % chunk;
      tri_op[r * S::ldc + j] = from_float<T>(tri[r * S::ldf + j] * betas[j]);
    }
    // keys pre-decayed to the chunk start: exp(b_r) k_r (into the queries' tile, now free)
    for (int e = tid; e < chunk * K / 8; e += int(blockDim.x)) {
      const int r = e / (K / 8), i = (e % (K / 8)) * 8;
      float x[8];
      load8(keys + r * S::ldk + i, x);
      const float f = __expf(gates[r]);
#pragma unroll
      for (int m = 0; m < 8; ++m) x[m] *= f;
      store8_aligned(queries + r * S::ldk + i, x);
    }
    wait_copies<0>();
    __syncthreads();
    block_gemm<Op, row_major, row_major, chunk, K, chunk, true>(tri_op, S::ldc, queries, S::ldk, stage,
        [&](int r, int i, const float (&x)[8]) {
          if (r < n) store8_aligned(&args.w(b, t0 + r, hv, i), x);
        });
    block_gemm<Op, row_major, row_major, chunk, V, chunk, true>(tri_op, S::ldc, values, S::ldv, stage,
        [&](int r, int j, const float (&x)[8]) {
          if (r < n) store8_aligned(&args.u(b, t0 + r, hv, j), x);
        });
  }
}

}  // namespace linattn::cuda::detail
