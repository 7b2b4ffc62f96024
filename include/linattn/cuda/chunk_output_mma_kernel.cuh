// SPDX-License-Identifier: MIT
/// \file
/// Chunkwise form, pass 3 for 16-bit inputs after chunk_state_rows_kernel.cuh: the output of
/// every chunk at once, from the state before the chunk (`states`, rounded to T), the
/// chunk-local pass's masked scores and U~ (V for the additive family):
///
///   O = scale diag(exp b) Q H + scores U~      [C, BV]
///
/// One block of 4 warps per (chunk and BV value columns, value head); warp w forms tokens
/// [16 w, 16 w + 16) on mma.sync tiles and stages them in its own rows of the query tile for
/// 16-byte stores.
#pragma once

#include "async_copy.cuh"
#include "chunk_args.cuh"
#include "mma.cuh"
#include "rule_coefficients.cuh"
#include "tile_io.cuh"

namespace linattn::cuda::detail {

template <class Rule, class T, int K, int BV>
struct chunk_output_layout {
  static_assert(sizeof(T) == 2, "the mma.sync output pass takes 16-bit inputs");
  static_assert(BV % 16 == 0, "whole 16-column steps");
  static constexpr int warps = 4, threads = 32 * warps;
  static constexpr int ldk = K + 8, ldv = BV + 8, lds = chunk + 8;  // 16-byte rows, off one bank
  static constexpr int queries = 0;                                 // T [C, ldk], then the output rows
  static constexpr int states = queries + chunk * ldk * 2;          // T [K, ldv]
  static constexpr int values = states + K * ldv * 2;               // T [C, ldv]  U~ or V
  static constexpr int scores = values + chunk * ldv * 2;           // T [C, lds]
  static constexpr int gates = scores + chunk * lds * 2;            // f32 [C]
  static constexpr int bytes = gates + chunk * 4;
};

template <class Rule, class T, int K, int BV>
__global__ void __launch_bounds__(128) chunk_output_mma_kernel(chunk_args<Rule, T> args) {
  using L = chunk_output_layout<Rule, T, K, BV>;
  constexpr int NT = BV / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  T* queries = reinterpret_cast<T*>(smem + L::queries);
  const T* states = reinterpret_cast<const T*>(smem + L::states);
  const T* values = reinterpret_cast<const T*>(smem + L::values);
  const T* scores = reinterpret_cast<const T*>(smem + L::scores);
  float* gates = reinterpret_cast<float*>(smem + L::gates);

  // blocks of one chunk's column blocks are adjacent, so they share its Q and score tiles in L2
  const unsigned column_blocks = unsigned(args.out.extent(3) / BV), chunk_index = blockIdx.x / column_blocks;
  const span c = args.chunk_at(chunk_index);
  const index_t hv = blockIdx.y, h = hv / args.group, v0 = index_t(blockIdx.x % column_blocks) * BV;
  const index_t b = c.b, t0 = c.start;
  const int n = c.length;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int r0 = 16 * warp;

  load_rows<chunk, K, L::threads>(queries, L::ldk, args.in.q, b, t0, n, h);
  load_rows<K, BV, L::threads>(const_cast<T*>(states), L::ldv, tensor_view<const T, 4>(args.states), index_t(chunk_index), 0, K, hv, v0);
  if constexpr (corrects<Rule>)
    load_rows<chunk, BV, L::threads>(const_cast<T*>(values), L::ldv, tensor_view<const T, 4>(args.u), b, t0, n, hv, v0);
  else
    load_rows<chunk, BV, L::threads>(const_cast<T*>(values), L::ldv, args.in.v, b, t0, n, hv, v0);
  load_rows<chunk, chunk, L::threads>(const_cast<T*>(scores), L::lds, tensor_view<const T, 4>(args.scores), b, t0, n, hv);
  for (int r = int(threadIdx.x); r < chunk; r += int(blockDim.x))
    copy_async_4(gates + r, &args.gate_cumsum(b, t0 + (r < n ? r : n - 1), hv));
  commit_copies();
  wait_copies<0>();
  __syncthreads();

  const ldm_lane al{lane % 16, (lane / 16) * 8}, kl = ldm_lane::kn_tiles(lane);
  float o[NT][4] = {};
  // Q H on this warp's tokens
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
    std::uint32_t a[4];
    ldmatrix_x4(a, queries + (r0 + al.row) * L::ldk + 16 * ks + al.col);
#pragma unroll
    for (int p = 0; p < NT / 2; ++p) {
      std::uint32_t bh[4];
      ldmatrix_x4<true>(bh, states + (16 * ks + kl.row) * L::ldv + 16 * p + kl.col);
      mma_16816<T>(o[2 * p], a, bh[0], bh[1]);
      mma_16816<T>(o[2 * p + 1], a, bh[2], bh[3]);
    }
  }
  const float f[2] = {args.scale * __expf(gates[r0 + g]), args.scale * __expf(gates[r0 + g + 8])};
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nt][e] *= f[e >> 1];
  // + scores U~ (scores causal: k-steps q <= warp)
#pragma unroll
  for (int q = 0; q < chunk / 16; ++q) {
    if (q > warp) continue;
    std::uint32_t a[4];
    ldmatrix_x4(a, scores + (r0 + al.row) * L::lds + 16 * q + al.col);
#pragma unroll
    for (int p = 0; p < NT / 2; ++p) {
      std::uint32_t bu[4];
      ldmatrix_x4<true>(bu, values + (16 * q + kl.row) * L::ldv + 16 * p + kl.col);
      mma_16816<T>(o[2 * p], a, bu[0], bu[1]);
      mma_16816<T>(o[2 * p + 1], a, bu[2], bu[3]);
    }
  }
  // the warp's rows of O -> its own (no longer read) query rows -> 16-byte stores of the valid rows
  T* stage = queries + r0 * L::ldk;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int half = 0; half < 2; ++half)
      store_pair(stage + (g + 8 * half) * L::ldk, 8 * nt + 2 * t, o[nt][2 * half], o[nt][2 * half + 1]);
  __syncwarp();
  constexpr int pieces = BV / 8;  // 16-byte pieces per row
#pragma unroll
  for (int i = lane; i < 16 * pieces; i += 32) {
    const int r = i / pieces, j = (i % pieces) * 8;
    if (r0 + r >= n) continue;
    float y[8];
    load8(stage + r * L::ldk + j, y);
    store8(args.out, b, t0 + r0 + r, hv, v0 + j, y);
  }
}

}  // namespace linattn::cuda::detail
