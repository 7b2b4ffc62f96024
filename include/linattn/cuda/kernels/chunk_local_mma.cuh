// SPDX-License-Identifier: MIT
/// \file
/// Chunkwise form, pass 1 for 16-bit inputs (__half, __nv_bfloat16): the same chunk-local
/// products as chunk_local_wmma.cuh on register-resident mma.sync tiles. One block of 8 warps
/// per (chunk, value head); warp w owns rows [16 rb, 16 rb + 16), rb = w % 4, of every [C, *]
/// result and half of its column blocks (ch = w / 4):
///
///   scores = scale (Q K^T ⊙ Gam)        causal; only column blocks <= rb are formed
///   A      = stril(diag(beta) (K K^T ⊙ Gam))                 -> shared memory (fp32)
///   X      = (I + A)^{-1}               blocked, 3xTF32 products (unit_lower_inverse.cuh)
///   W      = X diag(beta exp b) K,  U = X diag(beta) V      X rounded to the input type
///
/// V is copied into the queries' tile while the inverse is formed.
#pragma once

#include <type_traits>

#include "../tile/async_copy.cuh"
#include "../tile/load_store.cuh"
#include "../tile/mma_sync.cuh"
#include "chunk_args.cuh"
#include "chunk_coefficients.cuh"
#include "rule_coefficients.cuh"
#include "unit_lower_inverse.cuh"

namespace linattn::cuda::detail {

/// Shared memory of the mma.sync chunk-local pass, delta family.
template <class T, int K, int V>
struct chunk_local_mma_storage_delta {
  static constexpr int warps = 8, threads = 32 * warps;
  static constexpr int ldk = K + 8, ldv = V + 8, ldf = chunk + 4;
  T keys[chunk][ldk];            // [C, K]
  union {
    T queries[chunk][ldk];       // [C, K]
    T values[chunk][ldv];        // [C, V], once the scores are formed
  };
  float a[chunk][ldf];           // [C, C]  A
  float x[chunk][ldf];           // [C, C]  X = (I + A)^-1
  float scratch[warps][16 * 8];  // [warps][16, 8]  the inversion's per-warp tiles
  float gates[chunk];            // [C]  log gates, then b
  float betas[chunk];            // [C]
};

/// The additive family needs b and the scores only.
template <class T, int K, int V>
struct chunk_local_mma_storage_additive {
  static constexpr int warps = 8, threads = 32 * warps, ldk = K + 8, ldv = V + 8;
  T keys[chunk][ldk];            // [C, K]
  union {
    T queries[chunk][ldk];       // [C, K]
    T values[chunk][ldv];        // [C, V]  (not used: sizes the union as for the delta family)
  };
  float gates[chunk];            // [C]  log gates, then b
  float betas[chunk];            // [C]  (not used)
};

template <class Rule, class T, int K, int V>
using chunk_local_mma_storage =
    std::conditional_t<corrects<Rule>, chunk_local_mma_storage_delta<T, K, V>, chunk_local_mma_storage_additive<T, K, V>>;

template <class Rule, class T, int K, int V>
__global__ void __launch_bounds__(256, 3) chunk_local_mma_kernel(chunk_args<Rule, T> args) {
  static_assert(sizeof(T) == 2, "the mma.sync chunk-local pass takes 16-bit inputs");
  using S = chunk_local_mma_storage<Rule, T, K, V>;
  constexpr int CT = chunk / 8;
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& smem = *reinterpret_cast<S*>(dynamic_smem);
  T* keys = smem.keys[0];
  T* queries = smem.queries[0];
  T* values = smem.values[0];  // after the scores
  float* gates = smem.gates;
  float* betas = smem.betas;

  const int i = int(blockIdx.x);  // grid (chunks, HV)
  const auto [b, t0, hv, h, n] = args.block_chunk();
  const auto& in = args.in;
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int rb = warp % 4, ch = warp / 4;
  const int r0 = 16 * rb;  // this warp's rows

  load_keys_queries_gates<K, S::threads>(args, keys, queries, S::ldk, gates, betas, b, t0, n, h, hv);
  if (args.keys.data()) {  // copies of the tiles, padded rows included, for the state pass
    static_assert(S::ldk == K + pad<T>, "rows as in the workspace (chunk_args.cuh)");
    auto* to_keys = reinterpret_cast<uint4*>(&args.keys(b, t0, hv, 0));
    auto* to_queries = reinterpret_cast<uint4*>(&args.queries(b, t0, hv, 0));
    for (int e = tid; e < n * S::ldk * int(sizeof(T)) / 16; e += S::threads) {
      to_keys[e] = reinterpret_cast<const uint4*>(keys)[e];
      to_queries[e] = reinterpret_cast<const uint4*>(queries)[e];
    }
  }

  chunk_gates_and_betas<K>(args, keys, S::ldk, gates, betas, i, b, t0, n, hv);

  // Q K^T and K K^T on this warp's rows, column blocks p = 2 lp + ch <= rb (the rest is
  // masked); the accumulators hold this warp's blocks only
  const ldm_lane al = ldm_lane::a_tile(lane), bl = ldm_lane::b_tiles(lane), kl = ldm_lane::kn_tiles(lane);
  float sc[CT / 2][4] = {}, gr[CT / 2][4] = {};
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
    std::uint32_t aq[4], ak[4];
    ldmatrix_x4(aq, queries + (r0 + al.row) * S::ldk + 16 * ks + al.col);
    if constexpr (corrects<Rule>) ldmatrix_x4(ak, keys + (r0 + al.row) * S::ldk + 16 * ks + al.col);
#pragma unroll
    for (int lp = 0; lp < CT / 4; ++lp) {
      const int p = 2 * lp + ch;
      if (p > rb) continue;
      std::uint32_t bk[4];
      ldmatrix_x4(bk, keys + (16 * p + bl.row) * S::ldk + 16 * ks + bl.col);
      mma_pair<T>(sc[2 * lp], sc[2 * lp + 1], aq, bk);
      if constexpr (corrects<Rule>) mma_pair<T>(gr[2 * lp], gr[2 * lp + 1], ak, bk);
    }
  }
  const float scale = args.scale;
#pragma unroll
  for (int ln = 0; ln < CT / 2; ++ln) {
    const int p = 2 * (ln / 2) + ch, j = 16 * p + 8 * (ln % 2) + 2 * t;
    if (p > rb) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r0 + g + 8 * half;
      const float e0 = j <= r ? __expf(gates[r] - gates[j]) : 0.0f;
      const float e1 = j + 1 <= r ? __expf(gates[r] - gates[j + 1]) : 0.0f;
      if (r < n) store_pair(&args.scores(b, t0 + r, hv, 0), j, scale * sc[ln][2 * half] * e0, scale * sc[ln][2 * half + 1] * e1);
      if constexpr (corrects<Rule>) {
        float* a_tile = smem.a[0];
        const float s0 = j < r ? betas[r] * e0 : 0.0f, s1 = j + 1 < r ? betas[r] * e1 : 0.0f;
        *reinterpret_cast<float2*>(a_tile + r * S::ldf + j) = make_float2(s0 * gr[ln][2 * half], s1 * gr[ln][2 * half + 1]);
      }
    }
  }
  if constexpr (corrects<Rule>) {
    float* a_tile = smem.a[0];
    float* x_tile = smem.x[0];
    __syncthreads();  // A is complete; the queries' tile is free
    load_rows<chunk, V, S::threads>(values, S::ldv, in.v, b, t0, n, hv);
    commit_copies();
    invert_unit_lower_tc(a_tile, S::ldf, x_tile, S::ldf, smem.scratch[0]);
    wait_copies<0>();
    __syncthreads();

    // W = X diag(beta exp b) K and U = X diag(beta) V on this warp's rows and half of the
    // columns (X lower triangular: k-steps q <= rb)
    const auto products = [&](const T* tile, int ld, auto cols, bool decayed, const tensor_view<T, 4>& dst) {
      constexpr int D = decltype(cols)::value, LP = D / 32;  // 16-column pairs per half
      float acc[2 * LP][4] = {};
      T* rows[2] = {&dst(b, t0 + min(r0 + g, n - 1), hv, 0), &dst(b, t0 + min(r0 + g + 8, n - 1), hv, 0)};
#pragma unroll
      for (int q = 0; q < CT / 2; ++q) {
        if (q > rb) continue;
        const int j = 16 * q + 2 * t;
        float f[4];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int col = j + (m & 1) + 8 * (m >> 1);
          f[m] = decayed ? betas[col] * __expf(gates[col]) : betas[col];
        }
        std::uint32_t a[4];
        fp32_a_fragment<T>(a, x_tile, S::ldf, r0, 16 * q, lane, f);
#pragma unroll
        for (int lp = 0; lp < LP; ++lp)
          mma_pair_ldm<T, true>(acc[2 * lp], acc[2 * lp + 1], a,
                                tile + (16 * q + kl.row) * ld + 16 * (ch * LP + lp) + kl.col);
      }
#pragma unroll
      for (int ln = 0; ln < 2 * LP; ++ln)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = r0 + g + 8 * half;
          if (r < n) store_pair(rows[half], 16 * ch * LP + 8 * ln + 2 * t, acc[ln][2 * half], acc[ln][2 * half + 1]);
        }
    };
    products(keys, S::ldk, std::integral_constant<int, K>{}, true, args.w);
    products(values, S::ldv, std::integral_constant<int, V>{}, false, args.u);
  }
}

}  // namespace linattn::cuda::detail
