// SPDX-License-Identifier: MIT
/// \file
/// Chunkwise form, pass 1 for fp32 inputs (MATH.md §3.2 step 1 and §4.1; 16-bit inputs take
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

/// Shared-memory layout of the chunk-local kernel (byte offsets).
template <class Rule, class T, int K, int V>
struct chunk_local_layout {
  static_assert(std::is_same_v<T, float>, "the WMMA 3xTF32 chunk-local pass takes fp32 inputs");
  static constexpr int ldk = K + pad<T>, ldv = V + pad<T>, ldc = chunk + pad<T>, ldf = chunk + 4;
  static constexpr int warps = 16;
  static constexpr int threads = 32 * warps;
  static constexpr int keys = 0;                                              // T [C, ldk]
  static constexpr int queries = keys + chunk * ldk * int(sizeof(T));         // T [C, ldk], later exp(b) K
  static constexpr int a = queries + chunk * ldk * int(sizeof(T));            // f32 [C, ldf]
  static constexpr int t = a + (corrects<Rule> ? chunk * ldf * 4 : 0);        // f32 [C, ldf]
  static constexpr int t_op = t + (corrects<Rule> ? chunk * ldf * 4 : 0);     // T [C, ldc]
  static constexpr int stage = t_op + (corrects<Rule> ? chunk * ldc * int(sizeof(T)) : 0);  // f32 [warps, 16x20]
  static constexpr int gates = stage + warps * stage_floats * 4;              // f32 [C]
  static constexpr int betas = gates + chunk * 4;                             // f32 [C]
  static constexpr int end = betas + chunk * 4;
  // V [C, ldv] is loaded once A is no longer needed: into A's place when it fits (16-bit
  // inputs), which keeps two blocks per multiprocessor.
  static constexpr bool values_in_a = chunk * ldv * int(sizeof(T)) <= chunk * ldf * 4;
  static constexpr int values = values_in_a ? a : end;
  static constexpr int bytes = values_in_a || !corrects<Rule> ? end : end + chunk * ldv * int(sizeof(T));
};

template <class Rule, class T, int K, int V>
__global__ void __launch_bounds__(512) chunk_local_kernel(chunk_args<Rule, T> args) {
  using L = chunk_local_layout<Rule, T, K, V>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* keys = reinterpret_cast<T*>(smem + L::keys);
  T* queries = reinterpret_cast<T*>(smem + L::queries);
  T* values = reinterpret_cast<T*>(smem + L::values);
  float* a = reinterpret_cast<float*>(smem + L::a);
  float* tri = reinterpret_cast<float*>(smem + L::t);
  T* tri_op = reinterpret_cast<T*>(smem + L::t_op);
  float* stage = reinterpret_cast<float*>(smem + L::stage);
  float* gates = reinterpret_cast<float*>(smem + L::gates);
  float* betas = reinterpret_cast<float*>(smem + L::betas);

  const span c = args.chunk_at(blockIdx.x);
  const index_t hv = blockIdx.y, h = hv / args.group;
  const index_t b = c.b, t0 = c.start;
  const int n = c.length;
  const auto& in = args.in;
  const int tid = int(threadIdx.x);

  load_keys_queries_gates<K, L::threads>(args, keys, queries, L::ldk, gates, b, t0, n, h, hv);

  chunk_gates_and_betas<K>(args, keys, L::ldk, gates, betas, int(blockIdx.x), b, t0, n, hv);

  // scores = scale (Q K^T ⊙ Gam), causal; rows past n are not stored.
  const float scale = args.scale;
  block_gemm<T, row_major, col_major, chunk, chunk, K, false, true>(queries, L::ldk, keys, L::ldk, stage,
      [&](int r, int j, const float (&x)[8]) {
        if (r >= n) return;
        float y[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) y[e] = j + e <= r ? scale * x[e] * __expf(gates[r] - gates[j + e]) : 0.0f;
        store8_aligned(&args.scores(b, t0 + r, hv, j), y);
      });
  if constexpr (corrects<Rule>) {
    // A = stril(diag(beta) (K K^T ⊙ Gam))
    block_gemm<T, row_major, col_major, chunk, chunk, K, false, true>(keys, L::ldk, keys, L::ldk, stage,
        [&](int r, int j, const float (&x)[8]) {
#pragma unroll
          for (int e = 0; e < 8; ++e)
            a[r * L::ldf + j + e] = j + e < r ? betas[r] * x[e] * __expf(gates[r] - gates[j + e]) : 0.0f;
        });
    __syncthreads();
    invert_unit_lower_tc(a, L::ldf, tri, L::ldf, stage);  // tri = (I + A)^{-1}; A is free now
    load_rows<chunk, V, L::threads>(values, L::ldv, in.v, b, t0, n, hv);
    commit_copies();
    for (int e = tid; e < chunk * chunk; e += int(blockDim.x)) {  // T = (I + A)^{-1} diag(beta)
      const int r = e / chunk, j = e % chunk;
      tri_op[r * L::ldc + j] = from_float<T>(tri[r * L::ldf + j] * betas[j]);
    }
    // keys pre-decayed to the chunk start: exp(b_r) k_r (into the queries' tile, now free)
    for (int e = tid; e < chunk * K / 8; e += int(blockDim.x)) {
      const int r = e / (K / 8), i = (e % (K / 8)) * 8;
      float x[8];
      load8(keys + r * L::ldk + i, x);
      const float f = __expf(gates[r]);
#pragma unroll
      for (int m = 0; m < 8; ++m) x[m] *= f;
      store8_aligned(queries + r * L::ldk + i, x);
    }
    wait_copies<0>();
    __syncthreads();
    block_gemm<T, row_major, row_major, chunk, K, chunk, true>(tri_op, L::ldc, queries, L::ldk, stage,
        [&](int r, int i, const float (&x)[8]) {
          if (r < n) store8_aligned(&args.w(b, t0 + r, hv, i), x);
        });
    block_gemm<T, row_major, row_major, chunk, V, chunk, true>(tri_op, L::ldc, values, L::ldv, stage,
        [&](int r, int j, const float (&x)[8]) {
          if (r < n) store8_aligned(&args.u(b, t0 + r, hv, j), x);
        });
  }
}

}  // namespace linattn::cuda::detail
