// SPDX-License-Identifier: MIT
/// \file
/// Chunkwise form, pass 1 for per-key decays (VectorDecay / GLA, KDA; docs/math.md#kda and
/// docs/math.md#vector-decay-pivoting), any input type, computed in fp32: independent for every
/// chunk and value head. With b [C, K] the chunk-local cumsum of the log gates,
///
///   P = [Σ_d q_rd k_cd exp(b_rd - b_cd)]_{c <= r}   scores (scaled), causal        [C, C]
///   A = stril(diag(beta) [Σ_d k_rd k_cd exp(b_rd - b_cd)])                          [C, C]
///   T = (I + A)^{-1} diag(beta)                                                     [C, C]
///   W = T (K ⊙ exp b),  U = T V                                                     [C, K], [C, V]
///
/// and, for the state passes, which then need no gate of their own (state_pass_decays.cuh):
/// Q ⊙ exp(b) and K ⊙ exp(1 b_Cᵀ - b) [C, K] in the workspace's query and key rows and the key
/// rows' decays exp(b_C) [K]. The additive family (VectorDecay) needs P and those only.
///
/// P and A are not products with a mask, so they are formed in 16-row blocks. A block below
/// the diagonal, rows of block I against keys of block J < I, is an ordinary product through
/// the pivot e = the last row of J (b is non-increasing, so both exponents are <= 0):
///   (Q_I ⊙ exp(b_I - 1 b_eᵀ)) (K_J ⊙ exp(1 b_eᵀ - b_J))ᵀ.
/// A diagonal block takes the pivot e = its own last row: the key factors stay <= 1 and the row
/// factors exp(b_r - b_e) >= 1 are bounded by the block's decay span. Where every span of the
/// chunk is at most `bounded_span` (exp(40) ~ 2e17, far inside fp32), the diagonal blocks are
/// products too; otherwise (strong gates, resets) they take their exponentials element by
/// element. The products run on tensor cores (`Op`, tile/block_gemm.cuh).
#pragma once

#include <type_traits>

#include "../tile/block_gemm.cuh"
#include "../tile/load_store.cuh"
#include "chunk_args.cuh"
#include "chunk_coefficients.cuh"
#include "rule_coefficients.cuh"
#include "unit_lower_inverse.cuh"

namespace linattn::cuda::detail {

/// Shared memory of the per-key chunk-local pass: fp32 tiles whatever the input type.
template <int K, int V>
struct alignas(128) chunk_local_per_key_storage {
  static constexpr int warps = 16, threads = 32 * warps;
  static constexpr int ldk = K + 4, ldv = V + 4, ldf = chunk + 4;
  static constexpr int blocks = chunk / 16;                              // 16-row blocks of a chunk
  static constexpr int pivoted_rows = 16 * blocks * (blocks - 1) / 2;    // the off-diagonal blocks' rows
  static constexpr float bounded_span = 40.0f;                       // see the file comment
  /// While P and A are formed.
  struct gram_tiles {
    float to_pivot[chunk][ldk];             // [C, K]  k_c ⊙ exp(b_e - b_c), e the last row of c's block
    float from_pivot[pivoted_rows + chunk][ldk];  // [96 + C, K]  per block J, rows r of the later blocks:
                                            //  q_r (or k_r) ⊙ exp(b_r - b_e), e the last row of J; then every
                                            //  row r, raw, or (bounded spans) ⊙ exp(b_r - b_e), e the last
                                            //  row of r's own block
  };
  /// While W and U are formed.
  struct product_tiles {
    float values[chunk][ldv];               // [C, V]
    float decayed_keys[chunk][ldk];         // [C, K]  K ⊙ exp(b)
    float stage[warps][stage_floats];       // [warps][16, 20]  block_gemm's per-warp tiles
  };
  float keys[chunk][ldk];                   // [C, K]
  float cumsum[chunk][ldk];                 // [C, K]  log gates, then b
  float a[chunk][ldf];                      // [C, C]  A, then T
  float x[chunk][ldf];                      // [C, C]  P before the scale, then (I + A)^{-1}
  float betas[chunk];                       // [C]
  union {
    gram_tiles gram;
    product_tiles products;
  };
};

/// The 16 x 16 blocks of P or A on tensor cores: warp p < 6 forms block p below the diagonal,
/// counted down the columns (J = 0: I = 1, 2, 3; J = 1: I = 2, 3; J = 2: I = 3), whose pivoted
/// rows are from_pivot[16 p, 16 p + 16); with `diagonal`, warp 6 + I forms diagonal block I
/// from rows from_pivot[96 + 16 I, +16). `dst` [C, ldf]; a diagonal block is written whole.
template <class Op, class S>
__device__ void per_key_tiles(S& smem, float* dst, bool diagonal) {
  using traits = mma_traits<Op>;
  const int warp = int(threadIdx.x) / 32, below = S::pivoted_rows / 16;
  if (warp >= below + (diagonal ? S::blocks : 0)) return;
  int p = warp, J = 0;
  if (warp >= below) {
    J = warp - below;
  } else {
    while (p >= S::blocks - 1 - J) p -= S::blocks - 1 - J, ++J;
  }
  const int I = warp >= below ? J : J + 1 + p;
  wmma::fragment<wmma::accumulator, 16, 16, traits::k_step, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  const float* rows = smem.gram.from_pivot[16 * warp];
  const float* keys = smem.gram.to_pivot[16 * J];
  constexpr int depth = S::ldk - 4;
#pragma unroll 4
  for (int k0 = 0; k0 < depth; k0 += traits::k_step)
    traits::template step<row_major, col_major>(acc, rows + k0, S::ldk, keys + k0, S::ldk);
  wmma::store_matrix_sync(dst + 16 * I * S::ldf + 16 * J, acc, S::ldf, wmma::mem_row_major);
}

/// The four diagonal 16 x 16 blocks of P or A element by element (unbounded spans) on the warps from
/// `first_warp` on: dst[r][c] = Σ_d rows[r][d] k[c][d] exp(b_rd - b_cd) for c <= r in r's
/// block, 0 for c > r. Lanes c and c + 16 of a warp split the key dimensions of column c.
template <class S>
__device__ void per_key_diagonal(S& smem, const float (*rows)[S::ldk], float* dst, int first_warp) {
  constexpr int depth = S::ldk - 4;
  const int w = int(threadIdx.x) / 32 - first_warp, count = S::warps - first_warp, lane = int(threadIdx.x) % 32;
  if (w < 0) return;
  const int half = lane / 16;
  for (int r = w; r < chunk; r += count) {
    const int c = (r & ~15) + lane % 16;
    float sum = 0.0f;
    if (c <= r)
      for (int d = half; d < depth; d += 2)
        sum += rows[r][d] * smem.keys[c][d] * __expf(smem.cumsum[r][d] - smem.cumsum[c][d]);
    sum += __shfl_xor_sync(0xffffffffu, sum, 16);
    if (half == 0) dst[r * S::ldf + c] = sum;
  }
}

/// dst = src ⊙ exp(from - to) on piece p (of K / 8) of fp32 tile rows of K: the 16-byte words
/// at columns 4p and K/2 + 4p, so that consecutive threads touch consecutive words (no
/// shared-memory bank conflicts; 8 consecutive floats a thread would be 2-way conflicting).
template <int K>
__device__ inline void decay8(float* dst, const float* src, const float* from, const float* to, int p) {
  static_assert(K % 8 == 0, "whole pieces");
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int c = 4 * p + half * (K / 2);
    float4 x = *reinterpret_cast<const float4*>(src + c);
    const float4 f = *reinterpret_cast<const float4*>(from + c), g = *reinterpret_cast<const float4*>(to + c);
    x.x *= __expf(f.x - g.x), x.y *= __expf(f.y - g.y), x.z *= __expf(f.z - g.z), x.w *= __expf(f.w - g.w);
    *reinterpret_cast<float4*>(dst + c) = x;
  }
}

/// from_pivot <- rows r of every block after block J, times exp(b_r - b_e) with e the last row
/// of J, for J = 0, 1, 2 in turn.
template <class S>
__device__ void per_key_from_pivot(S& smem, const float (*rows)[S::ldk]) {
  constexpr int K = S::ldk - 4, pieces = K / 8;  // 8-float pieces per row
  for (int e = int(threadIdx.x); e < S::pivoted_rows * pieces; e += S::threads) {
    int slot = e / pieces, J = 0;
    while (slot >= 16 * (S::blocks - 1 - J)) slot -= 16 * (S::blocks - 1 - J), ++J;
    const int r = 16 * (J + 1) + slot, pivot = 16 * J + 15;
    decay8<K>(smem.gram.from_pivot[e / pieces], rows[r], smem.cumsum[r], smem.cumsum[pivot], e % pieces);
  }
}

/// `Op` is the precision of the block products: `float` (3xTF32) or `single_tf32` (fp32 inputs
/// with options::precision = tf32, and 16-bit inputs). The inverse stays 3xTF32.
template <class Rule, class T, int K, int V, class Op>
__global__ void __launch_bounds__(512) chunk_local_per_key_kernel(chunk_args<Rule, T> args) {
  using S = chunk_local_per_key_storage<K, V>;
  static_assert(chunk == 64 && S::pivoted_rows / 16 + S::blocks <= S::warps, "one warp per block product");
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& smem = *reinterpret_cast<S*>(dynamic_smem);
  constexpr int diagonal_warps_from = S::pivoted_rows / 16;  // (unbounded spans) the other warps form the
                                                             // diagonal blocks meanwhile

  const auto [b, t0, hv, h, n] = args.block_chunk();
  const auto& in = args.in;
  const int tid = int(threadIdx.x);

  // q, k and the log gates in fp32; zero past the chunk's n tokens. The raw queries go to the
  // own-block rows of from_pivot.
  float (*own)[S::ldk] = smem.gram.from_pivot + S::pivoted_rows;  // [C, ldk]
  constexpr int pieces = K / 8;  // 8-element pieces per row: each thread steps over whole pieces
  for (int e = tid; e < chunk * pieces; e += S::threads) {
    const int r = e / pieces, d = (e % pieces) * 8;
    float k8[8] = {}, q8[8] = {};
    if (r < n) {
      load8(in.k, b, t0 + r, h, d, k8);
      load8(in.q, b, t0 + r, h, d, q8);
    }
    store8_aligned(&smem.keys[r][d], k8);
    store8_aligned(&own[r][d], q8);
  }
  {  // the gates through the rule, element by element: consecutive threads read consecutive keys, and
     // every thread's loads are issued before the first store
    constexpr int per_thread = chunk * K / S::threads;
    static_assert(chunk * K % S::threads == 0, "whole rows of threads");
    float g[per_thread];
#pragma unroll
    for (int i = 0; i < per_thread; ++i) {
      const int e = tid + i * S::threads, r = e / K;
      g[i] = r < n ? key_log_gate<Rule, T>(in, b, t0 + r, hv, e % K) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < per_thread; ++i) {
      const int e = tid + i * S::threads;
      smem.cumsum[e / K][e % K] = g[i];
    }
  }
  __syncthreads();
  if constexpr (corrects<Rule>) chunk_write_strengths<K>(args, smem.keys[0], S::ldk, smem.betas, b, t0, n, hv);
  {  // b, down each key column: parts of chunk / parts rows, then the earlier parts' totals (in A's space)
    constexpr int parts = S::threads / K, rows = chunk / parts;
    static_assert(S::threads % K == 0 && chunk % parts == 0 && parts * K <= chunk * S::ldf, "whole parts");
    const int d = tid % K, part = tid / K;
    float* totals = smem.a[0];  // [parts, K]
    float run = 0.0f;
    for (int r = part * rows; r < (part + 1) * rows; ++r) smem.cumsum[r][d] = run += smem.cumsum[r][d];
    totals[part * K + d] = run;
    __syncthreads();
    float before = 0.0f;
    for (int q = 0; q < part; ++q) before += totals[q * K + d];
    for (int r = part * rows; r < (part + 1) * rows; ++r) smem.cumsum[r][d] += before;
  }
  __syncthreads();
  // the diagonal blocks are products when every block's decay span is bounded
  bool unbounded = false;
  for (int e = tid; e < S::blocks * K; e += S::threads) {
    const int I = e / K, d = e % K;
    unbounded |= !(smem.cumsum[16 * I][d] - smem.cumsum[16 * I + 15][d] <= S::bounded_span);  // NaN: unbounded
  }
  const bool bounded = !__syncthreads_or(unbounded);

  // keys decayed to the last row of their block; query rows decayed from each earlier block's last
  // row; the state pass's operands: Q ⊙ exp(b), K ⊙ exp(1 b_Cᵀ - b), and exp(b_C) per key row (b is
  // constant past the chunk's end, so b_C is b of its last token)
  for (int e = tid; e < chunk * pieces; e += S::threads) {
    const int r = e / pieces;
    decay8<K>(smem.gram.to_pivot[r], smem.keys[r], smem.cumsum[r | 15], smem.cumsum[r], e % pieces);
  }
  for (int e = tid; e < chunk * pieces; e += S::threads) {
    const int r = e / pieces, d = (e % pieces) * 8;
    if (r < n) {
      float br[8], last[8], x[8], y[8];
      load8(&smem.cumsum[r][d], br);
      load8(&smem.cumsum[chunk - 1][d], last);
      load8(&own[r][d], x);
      load8(&smem.keys[r][d], y);
#pragma unroll
      for (int m = 0; m < 8; ++m) x[m] *= __expf(br[m]), y[m] *= __expf(last[m] - br[m]);
      store8(args.queries, b, t0 + r, hv, d, x);
      store8(args.keys, b, t0 + r, hv, d, y);
    }
  }
  for (int d = tid; d < K; d += S::threads) args.gate_cumsum(int(blockIdx.x), hv, d) = __expf(smem.cumsum[chunk - 1][d]);
  per_key_from_pivot(smem, own);
  __syncthreads();
  const auto own_rows = [&](const float (*rows)[S::ldk]) {  // own <- rows ⊙ exp(b_r - b_e), e = r's block's last row
    for (int e = tid; e < chunk * pieces; e += S::threads) {
      const int r = e / pieces;
      decay8<K>(own[r], rows[r], smem.cumsum[r], smem.cumsum[r | 15], e % pieces);
    }
  };
  if (bounded) {
    own_rows(own);
    __syncthreads();
  }
  per_key_tiles<Op>(smem, smem.x[0], bounded);
  if (!bounded) per_key_diagonal(smem, own, smem.x[0], diagonal_warps_from);
  __syncthreads();

  // scores = scale P: the 16 x 16 tiles on and below the diagonal of the chunk's rows
  const float scale = args.scale;
  for (int e = tid; e < chunk * chunk / 8; e += S::threads) {
    const int r = e / (chunk / 8), j = (e % (chunk / 8)) * 8;
    if (r >= n || j > (r | 15)) continue;
    float y[8];
#pragma unroll
    for (int m = 0; m < 8; ++m) y[m] = j + m <= r ? scale * smem.x[r][j + m] : 0.0f;
    store8_aligned(&args.scores(b, t0 + r, hv, j), y);
  }

  if constexpr (corrects<Rule>) {
    // A = stril(diag(beta) Gram), the Gram with keys in place of queries
    per_key_from_pivot(smem, smem.keys);
    if (bounded) own_rows(smem.keys);
    __syncthreads();
    per_key_tiles<Op>(smem, smem.a[0], bounded);
    if (!bounded) per_key_diagonal(smem, smem.keys, smem.a[0], diagonal_warps_from);
    __syncthreads();
    for (int e = tid; e < chunk * chunk; e += S::threads) {
      const int r = e / chunk, j = e % chunk;
      smem.a[r][j] = j < r ? smem.betas[r] * smem.a[r][j] : 0.0f;
    }
    __syncthreads();
    invert_unit_lower_tc(smem.a[0], S::ldf, smem.x[0], S::ldf, smem.gram.from_pivot[0]);  // x = (I + A)^{-1}
    for (int e = tid; e < chunk * chunk; e += S::threads) {  // T = (I + A)^{-1} diag(beta)
      const int r = e / chunk, j = e % chunk;
      smem.a[r][j] = smem.x[r][j] * smem.betas[j];
    }
  }

  if constexpr (corrects<Rule>) {
    __syncthreads();  // the pivoted tiles are read; their space takes V and K ⊙ exp(b)
    for (int e = tid; e < chunk * V / 8; e += S::threads) {
      const int r = e / (V / 8), j = (e % (V / 8)) * 8;
      float v8[8] = {};
      if (r < n) load8(in.v, b, t0 + r, hv, j, v8);
      store8_aligned(&smem.products.values[r][j], v8);
    }
    for (int e = tid; e < chunk * pieces; e += S::threads) {
      const int r = e / pieces, d = (e % pieces) * 8;
      float k8[8], b8[8];
      load8(&smem.keys[r][d], k8);
      load8(&smem.cumsum[r][d], b8);
#pragma unroll
      for (int m = 0; m < 8; ++m) k8[m] *= __expf(b8[m]);
      store8_aligned(&smem.products.decayed_keys[r][d], k8);
    }
    __syncthreads();
    float* stage = smem.products.stage[0];
    block_gemm<Op, row_major, row_major, chunk, K, chunk, true>(smem.a[0], S::ldf, smem.products.decayed_keys[0], S::ldk,
        stage, [&](int r, int i, const float (&x)[8]) {
          if (r < n) store8_aligned(&args.w(b, t0 + r, hv, i), x);
        });
    block_gemm<Op, row_major, row_major, chunk, V, chunk, true>(smem.a[0], S::ldf, smem.products.values[0], S::ldv, stage,
        [&](int r, int j, const float (&x)[8]) {
          if (r < n) store8_aligned(&args.u(b, t0 + r, hv, j), x);
        });
  }
}

}  // namespace linattn::cuda::detail
