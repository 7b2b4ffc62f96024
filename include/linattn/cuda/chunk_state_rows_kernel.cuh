// SPDX-License-Identifier: MIT
/// \file
/// Chunkwise form, pass 2 for 16-bit inputs when few sequences x heads leave the
/// multiprocessors idle: the sequential recurrence only, with the output left to a parallel
/// pass (chunk_output_mma_kernel.cuh). One block of 4 warps per (sequence, value head, BV value
/// columns); the block's state H [K, BV] lives in fp32 accumulator registers, warp w owning
/// key rows [w K/4, (w+1) K/4). Per chunk, with its tiles shared in shared memory:
///
///   states[chunk] = H                     rounded to T; the output pass reads it
///   U~ = U - W H                          warp w: tokens [16 w, 16 w + 16); written over U
///   H <- exp(b_C) H + K^T diag(exp(b_C - b)) U~
///
/// H reaches the U~ product through shared memory (rounded to T, as the fused pass rounds it),
/// and U~ reaches the update the same way: two block barriers per chunk, no partial sums.
/// Dropping the output products (Q H and the scores) and their Q and score tiles from the
/// sequential loop is what makes it faster than chunk_state_mma_kernel at small B x H, at the
/// cost of writing and re-reading one state per chunk.
#pragma once

#include "async_copy.cuh"
#include "chunk_args.cuh"
#include "mma.cuh"
#include "rule_coefficients.cuh"
#include "tile_io.cuh"

namespace linattn::cuda::detail {

template <class Rule, class T, int K, int BV>
struct chunk_state_rows_layout {
  static_assert(sizeof(T) == 2, "the register-resident state pass takes 16-bit inputs");
  static_assert(BV % 16 == 0 && K % 64 == 0, "whole 16-column steps; 16-key steps per warp");
  static constexpr int warps = 4, threads = 32 * warps;
  static constexpr int keys_per_warp = K / warps;
  static constexpr int ldk = K + 8, ldv = BV + 8;  // 16-byte rows, off one bank
  // one buffer of a chunk's tiles (byte offsets)
  static constexpr int wgt = 0;                                                 // T [C, ldk]  W
  static constexpr int keys = wgt + (corrects<Rule> ? chunk * ldk * 2 : 0);     // T [C, ldk]
  static constexpr int values = keys + chunk * ldk * 2;                         // T [C, ldv]  U or V
  static constexpr int gates = values + chunk * ldv * 2;                        // f32 [C]
  static constexpr int buffer = (gates + chunk * 4 + 127) / 128 * 128;
  static constexpr int state = 2 * buffer;                                      // T [K, ldv]  H
  static constexpr int written = state + K * ldv * 2;                           // T [C, ldv]  diag(exp(b_C - b)) U~
  static constexpr int bytes = written + chunk * ldv * 2;
};

/// Queues the copies of one chunk's tiles into `buf` (one commit group per thread).
template <class Rule, class T, int K, int BV>
__device__ void load_state_tiles(unsigned char* buf, const chunk_args<Rule, T>& args, index_t b, int t0, int n,
                                 index_t hv, index_t h, index_t v0) {
  using L = chunk_state_rows_layout<Rule, T, K, BV>;
  if constexpr (corrects<Rule>) {
    load_rows<chunk, K, L::threads>(reinterpret_cast<T*>(buf + L::wgt), L::ldk, tensor_view<const T, 4>(args.w), b, t0, n, hv);
    load_rows<chunk, BV, L::threads>(reinterpret_cast<T*>(buf + L::values), L::ldv, tensor_view<const T, 4>(args.u), b, t0, n, hv, v0);
  } else {
    load_rows<chunk, BV, L::threads>(reinterpret_cast<T*>(buf + L::values), L::ldv, args.in.v, b, t0, n, hv, v0);
  }
  load_rows<chunk, K, L::threads>(reinterpret_cast<T*>(buf + L::keys), L::ldk, args.in.k, b, t0, n, h);
  float* gates = reinterpret_cast<float*>(buf + L::gates);
  for (int r = int(threadIdx.x); r < chunk; r += int(blockDim.x))
    copy_async_4(gates + r, &args.gate_cumsum(b, t0 + (r < n ? r : n - 1), hv));
  commit_copies();
}

template <class Rule, class T, int K, int BV>
__global__ void __launch_bounds__(128) chunk_state_rows_kernel(chunk_args<Rule, T> args) {
  using L = chunk_state_rows_layout<Rule, T, K, BV>;
  constexpr int MT = L::keys_per_warp / 16;  // m-tiles of the warp's key rows
  constexpr int NT = BV / 8;                 // n-tiles of the block's columns
  extern __shared__ __align__(128) unsigned char smem[];
  T* state = reinterpret_cast<T*>(smem + L::state);
  T* written = reinterpret_cast<T*>(smem + L::written);

  const index_t n_seq = blockIdx.z, hv = blockIdx.y, v0 = index_t(blockIdx.x) * BV;
  const index_t h = hv / args.group;
  const span s = args.sequence(n_seq);
  const index_t b = s.b;
  const int end = s.start + s.length;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int k0 = warp * L::keys_per_warp;  // the warp's key rows of H
  const int r0 = 16 * warp;                // the warp's tokens of U~

  // H(k0 + 16 m + g + 8 (e >> 1), v0 + 8 nt + 2 t + (e & 1)) = hs[m][nt][e]
  float hs[MT][NT][4];
  const auto key = [&](int m, int e) { return k0 + 16 * m + g + 8 * (e >> 1); };
  const auto col = [&](int nt, int e) { return 8 * nt + 2 * t + (e & 1); };
  // H rounded to T into the shared state tile (4-byte stores of column pairs)
  const auto share_state = [&] {
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          store_pair(state + key(m, 2 * half) * L::ldv, col(nt, 0), hs[m][nt][2 * half], hs[m][nt][2 * half + 1]);
  };
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) hs[m][nt][e] = args.s0.data() ? args.s0(n_seq, hv, key(m, e), v0 + col(nt, e)) : 0.0f;
  share_state();

  const auto buffer = [&](int c) { return smem + (c % 2) * L::buffer; };
  if (s.length > 0) load_state_tiles<Rule, T, K, BV>(buffer(0), args, b, s.start, min(chunk, s.length), hv, h, v0);

  const ldm_lane al{lane % 16, (lane / 16) * 8}, bl = ldm_lane::b_tiles(lane), kl = ldm_lane::kn_tiles(lane);
  for (int c = 0, t0 = s.start; t0 < end; ++c, t0 += chunk) {
    const int n = min(chunk, end - t0);
    wait_copies<0>();
    __syncthreads();  // this chunk's tiles and H are in; the other buffer is free
    if (t0 + chunk < end)
      load_state_tiles<Rule, T, K, BV>(buffer(c + 1), args, b, t0 + chunk, min(chunk, end - t0 - chunk), hv, h, v0);
    const unsigned char* buf = buffer(c);
    const T* wgt = reinterpret_cast<const T*>(buf + L::wgt);
    const T* keys = reinterpret_cast<const T*>(buf + L::keys);
    const T* values = reinterpret_cast<const T*>(buf + L::values);
    const float* gates = reinterpret_cast<const float*>(buf + L::gates);
    const float last = gates[chunk - 1];

    // the output pass's copy of H
    store_rows<K, BV>(state, L::ldv, args.states, s.first_chunk + c, 0, K, hv, v0);

    // U~ on this warp's tokens: U - W H (corrects), or V
    float x[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float2 u = unpack2<T>(*reinterpret_cast<const std::uint32_t*>(values + (r0 + g + 8 * half) * L::ldv + col(nt, 0)));
        x[nt][2 * half] = u.x, x[nt][2 * half + 1] = u.y;
      }
    if constexpr (corrects<Rule>) {
      float wh[NT][4] = {};
#pragma unroll
      for (int ks = 0; ks < K / 16; ++ks) {
        std::uint32_t a[4];
        ldmatrix_x4(a, wgt + (r0 + al.row) * L::ldk + 16 * ks + al.col);
#pragma unroll
        for (int p = 0; p < NT / 2; ++p) {
          std::uint32_t bh[4];
          ldmatrix_x4<true>(bh, state + (16 * ks + kl.row) * L::ldv + 16 * p + kl.col);
          mma_16816<T>(wh[2 * p], a, bh[0], bh[1]);
          mma_16816<T>(wh[2 * p + 1], a, bh[2], bh[3]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) x[nt][e] -= wh[nt][e];
      // U~ over U, for the output pass
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = r0 + g + 8 * half;
        if (r >= n) continue;
        T* row = &args.u(b, t0 + r, hv, v0);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) store_pair(row, col(nt, 0), x[nt][2 * half], x[nt][2 * half + 1]);
      }
    }
    // diag(exp(b_C - b)) U~ for the update
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r0 + g + 8 * half;
      const float f = __expf(last - gates[r]);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) store_pair(written + r * L::ldv, col(nt, 0), f * x[nt][2 * half], f * x[nt][2 * half + 1]);
    }
    __syncthreads();  // U~ is shared; every warp is done reading H

    // H <- exp(b_C) H + K^T written on this warp's key rows (K^T read transposed from the
    // token-major key tile)
    const float decay = __expf(last);
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) hs[m][nt][e] *= decay;
#pragma unroll
    for (int q = 0; q < chunk / 16; ++q) {
      std::uint32_t ak[MT][4];
#pragma unroll
      for (int m = 0; m < MT; ++m) ldmatrix_x4<true>(ak[m], keys + (16 * q + bl.row) * L::ldk + k0 + 16 * m + bl.col);
#pragma unroll
      for (int p = 0; p < NT / 2; ++p) {
        std::uint32_t bu[4];
        ldmatrix_x4<true>(bu, written + (16 * q + kl.row) * L::ldv + 16 * p + kl.col);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          mma_16816<T>(hs[m][2 * p], ak[m], bu[0], bu[1]);
          mma_16816<T>(hs[m][2 * p + 1], ak[m], bu[2], bu[3]);
        }
      }
    }
    share_state();  // read after the next barrier
  }
  if (args.s1.data())
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) args.s1(n_seq, hv, key(m, e), v0 + col(nt, e)) = hs[m][nt][e];
}

}  // namespace linattn::cuda::detail
