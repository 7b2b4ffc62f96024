// SPDX-License-Identifier: MIT
/// \file
/// The stages the backward kernels share for per-key decays (VectorDecay, KDA; docs/backward.md#cuda-per-key):
/// the chunk-local cumsum b [C, K] of the floored log gates of every key dimension (constant past
/// the chunk's n tokens), its factors Gam = exp(b) and E = exp(b_{n-1} - b), and the scores
///
///   P_rc = Σ_d q_rd k_cd exp(b_rd - b_cd)   (c <= r),   G_rc = Σ_d k_rd k_cd exp(b_rd - b_cd)   (c < r)
///
/// taken element by element: every exponent is <= 0 for log gates <= 0, so strong gates and
/// resets underflow to 0 instead of overflowing a factored product.
#pragma once

#include "chunk_factors.cuh"

namespace linattn::cuda::detail {

/// The per-key log gates of one chunk ([C, K], rows past n zero), held in registers between
/// `issue` (loads, all in flight; consecutive threads on consecutive keys) and `store`.
template <int K, int Threads>
struct key_gate_rows {
  static constexpr int count = backward_chunk * K, per_thread = (count + Threads - 1) / Threads;
  float g[per_thread];

  template <class Rule, class T>
  __device__ void issue(const backward_args<Rule, T>& args, index_t b, index_t t0, int n, index_t hv) {
#pragma unroll
    for (int i = 0; i < per_thread; ++i) {
      const int e = int(threadIdx.x) + i * Threads, r = e / K;
      g[i] = e < count && r < n ? key_log_gate<Rule, T>(args.in, b, t0 + r, hv, e % K) : 0.0f;
    }
  }
  __device__ void store(float* tile, int ld) const {
#pragma unroll
    for (int i = 0; i < per_thread; ++i) {
      const int e = int(threadIdx.x) + i * Threads;
      if (e < count) tile[(e / K) * ld + e % K] = g[i];
    }
  }
};

/// tile[r][d] <- Σ_{i <= r} tile[i][d] down every column of a [C, K] tile. Whole block; the
/// caller synchronises before and after.
template <int K>
__device__ void column_cumsum(float* tile, int ld) {
  for (int d = int(threadIdx.x); d < K; d += int(blockDim.x)) {
    float run = 0.0f;
#pragma unroll 8
    for (int r = 0; r < backward_chunk; ++r) tile[r * ld + d] = run += tile[r * ld + d];
  }
}

/// dst[r][d] = src[r][d] * exp(b[r][d]) (`toward_end` false: Gam) or
/// exp(b[C-1][d] - b[r][d]) (true: E), for a [C, K] tile; dst may be src. Whole block; the
/// caller synchronises.
template <int K>
__device__ void key_decayed(float* dst, const float* src, int ld, const float* b, bool toward_end) {
  for (int e = int(threadIdx.x); e < backward_chunk * K; e += int(blockDim.x)) {
    const int r = e / K, d = e % K;
    const float x = toward_end ? b[(backward_chunk - 1) * ld + d] - b[r * ld + d] : b[r * ld + d];
    dst[r * ld + d] = src[r * ld + d] * __expf(x);
  }
}

/// P (scores of `queries` against `keys`, c <= r) into p and, with `gram`, G (keys against keys,
/// c < r) into g ([C, C], ld chunk_corrections::ld, zero elsewhere): one warp per (r, c), its
/// lanes over the key dimensions. The caller synchronises.
template <int K>
__device__ void key_scores(const float* queries, const float* keys, const float* b, int ldk, float* p, float* g,
                           bool gram) {
  constexpr int C = backward_chunk, ld = chunk_corrections::ld;
  const int lane = int(threadIdx.x) % 32, warps = int(blockDim.x) / 32;
  for (int x = int(threadIdx.x) / 32; x < C * C; x += warps) {
    const int r = x / C, c = x % C;
    float ps = 0.0f, gs = 0.0f;
    if (c <= r) {
      for (int d = lane; d < K; d += 32) {
        const float kd = keys[c * ldk + d] * __expf(b[r * ldk + d] - b[c * ldk + d]);
        ps += queries[r * ldk + d] * kd;
        gs += keys[r * ldk + d] * kd;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o), gs += __shfl_xor_sync(0xffffffffu, gs, o);
    }
    if (lane == 0) {
      p[r * ld + c] = ps;
      if (gram) g[r * ld + c] = c < r ? gs : 0.0f;
    }
  }
}

}  // namespace linattn::cuda::detail
