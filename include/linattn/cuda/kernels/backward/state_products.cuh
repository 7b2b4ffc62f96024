// SPDX-License-Identifier: MIT
/// \file
/// Backward pass 4's products with a chunk state S [K, V] (the chunk-start state H0 or the
/// gradient dH of the chunk-end state, in the workspace: workspace_state_t), grouped in phases
/// that share one state:
///
///   rows job     out[C, V]  (=|+=)  sign diag(f) A S       A [C, K]  (K H0, K dH)
///   columns job  acc[C, K]  +=      sign diag(f) B S^T     B [C, V]  (dO H0^T, U dH^T, dY H0^T)
///                dots[r]    (=|+=)  <rows_r, that term_r>  (the gate gradient's row sums)
///                raw[r]     =       <rows_r, (B S^T)_r>    (optional: beta's gradient)
///
/// Two ways to take them, picked by the input type:
///  - `state_staging::global` (fp32 and fp16 inputs): WMMA block products (block_gemm.cuh) that
///    read S from the workspace, one TF32 product per step for fp16 (three for fp32);
///  - `state_staging::bf16_halves` (bf16 inputs): S, bf16 in the workspace, staged in shared
///    memory half by half (K / 2 rows at a time), and warp-level mma.sync m16n8k16 products with the fp32
///    tiles rounded to bf16 as they are read, or read by ldmatrix where the job gives the rows
///    as exact bf16 too (k, dO as loaded). The states then share the 16-bit rounding of
///    every other operand of a bf16 call; the products hand no result tile through shared memory.
///    One state (H0) can stay whole in shared memory for a later phase (`state_slot`); another
///    (dH) streams through a half buffer, and its dot with the resident one is summed from its
///    pieces as they are staged.
/// The caller's tiles are fp32 in shared memory, rows past the chunk zero.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>

#include "../../tile/block_gemm.cuh"
#include "../../tile/mma_sync.cuh"
#include "../../tile/warp_gemm.cuh"
#include "../../tile/warp_sums.cuh"
#include "backward_args.cuh"

namespace linattn::cuda::detail {

enum class state_staging { global, bf16_halves };

template <class T>
inline constexpr state_staging state_staging_for = std::is_same_v<T, __nv_bfloat16> ? state_staging::bf16_halves
                                                                                     : state_staging::global;

/// out[r][c] (= or +=) sign f[r] (A S)[r][c]; A [C, K] with row stride lda, out [C, V] with ldo.
/// `a16`: A again as bf16 that holds it exactly (rows as loaded; row stride lda16, rows 16-byte
/// aligned), which the bf16 staging reads by ldmatrix instead of rounding `a`; or null.
struct state_rows_job {
  const float* a;
  int lda;
  float* out;
  int ldo;
  const float* f;
  float sign;
  bool assign;
  const __nv_bfloat16* a16 = nullptr;
  int lda16 = 0;
};

/// acc[r][c] += y[r][c] = sign f[r] (B S^T)[r][c] and dots[r] (= or +=) sign f[r] raw[r] with
/// raw[r] = sum_c rows[r][c] (B S^T)[r][c], which also goes to raw_dots[r] when that is given;
/// B [C, V] (stride ldb), acc and rows [C, K] (stride ldk). `b16`: B as exact bf16 (row stride
/// ldb16), as a16 of state_rows_job; or null. `rows16`: the rows as bf16 (row stride ldr16),
/// read as rows_scale times their values (the same floats as an fp32 tile of them), in place
/// of `rows` (bf16 staging only); or null.
struct state_columns_job {
  const float* b;
  int ldb;
  float* acc;
  const float* rows;
  int ldk;
  const float* f;
  float sign;
  float* dots;
  bool add_dots;
  const __nv_bfloat16* b16 = nullptr;
  int ldb16 = 0;
  const __nv_bfloat16* rows16 = nullptr;
  int ldr16 = 0;
  float rows_scale = 1.0f;
  float* raw_dots = nullptr;  // [C]  or null
};

/// Where a phase finds its state S in shared memory (bf16 staging; the global staging reads
/// every state from the workspace, and ignores it).
enum class state_slot {
  streamed,         // staged half by half through `half`, which the next phase overwrites (dH)
  resident_staged,  // staged half by half into `whole`, where it stays (H0's first phase)
  resident          // in `whole` already (H0's later phases): no loads, no staging
};

/// The shared memory a phase needs beside the caller's tiles.
template <state_staging How, int K, int V>
struct state_phase_storage {
  float tmp[backward_chunk][(K > V ? K : V) + 4];  // [C, K]  one columns-job term
};

template <int K, int V>
struct state_phase_storage<state_staging::bf16_halves, K, V> {
  static constexpr int rows = K / 2, ld = V + 8;  // 16-byte aligned rows, conflict-free ldmatrix
  __nv_bfloat16 whole[K][ld];                    // [K, V]    a resident state (H0)
  __nv_bfloat16 half[rows][ld];                  // [K/2, V]  rows [h K/2, (h+1) K/2) of a streamed one (dH)
  float dot_parts[backward_chunk][K / 8];        // [C, K/8]  the dots per 8-column block
};

/// The element type of the states a staging reads from the workspace.
template <state_staging How>
using staged_state_t = std::conditional_t<How == state_staging::bf16_halves, __nv_bfloat16, float>;

/// part + <x, y> over two 16-byte pieces of elements of type E (fp32 or 16-bit), summed in fp32
/// in a fixed order.
template <class E>
__device__ inline float add_piece_dot(float part, const uint4& x, const uint4& y) {
  const std::uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    if constexpr (std::is_same_v<E, float>) {
      part += __uint_as_float(xs[w]) * __uint_as_float(ys[w]);
    } else {
      const float2 u = unpack2<E>(xs[w]), v = unpack2<E>(ys[w]);
      part += u.x * v.x + u.y * v.y;
    }
  }
  return part;
}

/// The pieces of one half of a state on their way to shared memory, in registers between
/// `issue` (the 16-byte loads, rows [h K/2, (h+1) K/2) of S) and `store`, so that the loads of
/// the next half or state overlap the products on the current one. Nothing to stage for
/// `state_staging::global`.
template <state_staging How, int K, int V, int Threads>
struct state_pieces {
  __device__ void issue(const float*, int) {}
};

template <int K, int V, int Threads>
struct state_pieces<state_staging::bf16_halves, K, V, Threads> {
  static constexpr int half = state_phase_storage<state_staging::bf16_halves, K, V>::rows;
  static constexpr int pieces = half * V / 8, per_thread = (pieces + Threads - 1) / Threads;  // 8 bf16 a piece
  static_assert(pieces % Threads == 0 || per_thread == 1, "whole 16-byte pieces per thread, or one at most");
  uint4 piece[per_thread];

  __device__ void issue(const __nv_bfloat16* S, int h) {
    const uint4* src = reinterpret_cast<const uint4*>(S + index_t(h) * half * V);
#pragma unroll
    for (int i = 0; i < per_thread; ++i)
      if (pieces % Threads == 0 || int(threadIdx.x) < pieces) piece[i] = src[int(threadIdx.x) + i * Threads];
  }
  static constexpr int ld = state_phase_storage<state_staging::bf16_halves, K, V>::ld;

  /// Into the half's K/2 rows at `rows` ([K/2, V], ld elements per row).
  __device__ void store(__nv_bfloat16 (*rows)[ld]) const {
#pragma unroll
    for (int i = 0; i < per_thread; ++i) {
      const int e = int(threadIdx.x) + i * Threads, r = e / (V / 8), c = (e % (V / 8)) * 8;
      if (pieces % Threads == 0 || e < pieces) *reinterpret_cast<uint4*>(&rows[r][c]) = piece[i];
    }
  }
  /// This thread's part of <these pieces, the same elements of `rows`> (the matching half of
  /// another state in shared memory), in fp32 in a fixed order.
  __device__ float dot(const __nv_bfloat16 (*rows)[ld]) const {
    float part = 0.0f;
#pragma unroll
    for (int i = 0; i < per_thread; ++i) {
      const int e = int(threadIdx.x) + i * Threads, r = e / (V / 8), c = (e % (V / 8)) * 8;
      if (pieces % Threads == 0 || e < pieces)
        part = add_piece_dot<__nv_bfloat16>(part, piece[i], *reinterpret_cast<const uint4*>(&rows[r][c]));
    }
    return part;
  }
};

/// This thread's part of <A, B> over two states [K, V] of the workspace (16-byte pieces, the
/// thread's at tid, tid + Threads, ...; all its loads in flight at once), summed in fp32 in a
/// fixed order. The blocks are 256-byte aligned.
template <int K, int V, int Threads, class E>
__device__ float state_dot_part(const E* a, const E* b) {
  constexpr int per_piece = 16 / int(sizeof(E)), pieces = K * V / per_piece, per_thread = pieces / Threads;
  static_assert(pieces % Threads == 0, "whole 16-byte pieces per thread");
  uint4 x[per_thread], y[per_thread];
#pragma unroll
  for (int i = 0; i < per_thread; ++i)
    x[i] = reinterpret_cast<const uint4*>(a)[int(threadIdx.x) + i * Threads],
    y[i] = reinterpret_cast<const uint4*>(b)[int(threadIdx.x) + i * Threads];
  float part = 0.0f;
#pragma unroll
  for (int i = 0; i < per_thread; ++i) part = add_piece_dot<E>(part, x[i], y[i]);
  return part;
}

/// The columns job's sums from its product tmp = B S^T ([C, D], stride ldt): acc_r += sign
/// f_r tmp_r, raw = <rows_r, tmp_r>, dots[r] (= or +=) sign f_r raw (and raw_dots[r] = raw),
/// one warp per row; the caller synchronises.
template <int D>
__device__ void row_dots_accumulate(const state_columns_job& j, const float* tmp, int ldt) {
  const int lane = int(threadIdx.x) % 32, warps = int(blockDim.x) / 32;
  for (int r = int(threadIdx.x) / 32; r < backward_chunk; r += warps) {
    const float f = j.sign * j.f[r];
    float s = 0.0f;
    for (int i = lane; i < D; i += 32) {
      const float y = tmp[r * ldt + i];
      s += j.rows[r * j.ldk + i] * y;
      j.acc[r * j.ldk + i] += f * y;
    }
    s = warp_sum(s);
    if (lane == 0) {
      j.dots[r] = j.add_dots ? j.dots[r] + f * s : f * s;
      if (j.raw_dots) j.raw_dots[r] = s;
    }
  }
}

/// One phase: the jobs (`rows` optional) on state S ([K, V], row-major, staged_state_t). With
/// the bf16 staging, `slot` says where S lies: streamed or resident_staged, `pieces` holds its
/// first half (issued by the caller or the phase before) and then the first half of `next`
/// when it is given; resident, S is in shared memory already and `pieces` is not touched.
/// `warp_dots` (streamed only; or null): each warp's part of <S, the resident state>, from the
/// pieces as they are stored, goes to warp_dots[warp], summed in a fixed order. Runs on the
/// whole block and ends synchronised; the caller synchronises before it (its tiles complete).
template <state_staging How, class P, int K, int V, int Threads>
__device__ void state_phase(state_phase_storage<How, K, V>& st, state_pieces<How, K, V, Threads>& pieces,
                            state_slot slot, const staged_state_t<How>* S, const staged_state_t<How>* next,
                            const state_rows_job* rows, const state_columns_job& cols, float* stage,
                            float* warp_dots = nullptr) {
  constexpr int C = backward_chunk;
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  if constexpr (How == state_staging::global) {
    constexpr int ldt = (K > V ? K : V) + 4;
    if (rows) {
      const state_rows_job j = *rows;
      block_gemm<P, row_major, row_major, C, V, K>(j.a, j.lda, S, V, stage, [&](int r, int c, const float (&x)[8]) {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          float& o = j.out[r * j.ldo + c + e];
          const float y = j.sign * j.f[r] * x[e];
          o = j.assign ? y : o + y;
        }
      });
    }
    block_gemm<P, row_major, col_major, C, K, V>(cols.b, cols.ldb, S, V, stage, [&](int r, int c, const float (&x)[8]) {
#pragma unroll
      for (int e = 0; e < 8; ++e) st.tmp[r][c + e] = x[e];
    });
    __syncthreads();
    row_dots_accumulate<K>(cols, st.tmp[0], ldt);
    __syncthreads();
  } else {
    using T = __nv_bfloat16;
    using St = state_phase_storage<How, K, V>;
    constexpr int warps = Threads / 32, half = St::rows;
    // rows job: [C, V] in units of 16 rows x 8 columns, row_units per warp, summed over both halves
    constexpr int row_units = (C / 16) * (V / 8) / warps;
    static_assert((C / 16) * (V / 8) % warps == 0, "whole row units per warp");
    float racc[row_units][4] = {};
    // columns job: [C, K/2] per half in units of 16 x 8; col_units units over the first warps
    constexpr int col_units = (C / 16) * (half / 8);
    static_assert(col_units <= warps, "one columns unit per warp");
    const int g = lane / 4, t = lane % 4;
    for (int h = 0; h < 2; ++h) {
      using half_rows = const T (*)[St::ld];
      half_rows sh = st.whole + h * half;  // [K/2, V]  the half's rows of S
      if (slot != state_slot::resident) {
        T(*to)[St::ld] = slot == state_slot::streamed ? st.half : st.whole + h * half;
        pieces.store(to);
        if (warp_dots) {
          const float part = warp_sum(pieces.dot(st.whole + h * half));
          if (lane == 0) warp_dots[warp] = h == 0 ? part : warp_dots[warp] + part;
        }
        __syncthreads();
        if (h == 0) pieces.issue(S, 1);
        else if (next) pieces.issue(next, 0);
        sh = to;
      }
      // the A fragment of rows [r0, r0 + 16), columns [k0, k0 + 16) of x: by ldmatrix from the
      // exact bf16 rows (Exact16) or rounded from the fp32 tile
      const auto a_fragment = [&]<bool Exact16>(std::uint32_t (&a)[4], const float* x, int ldx, const T* x16, int ld16,
                                                int r0, int k0) {
        if constexpr (Exact16) half_a_operand<row_major>(a, x16, ld16, r0, k0, lane);
        else fp32_a_fragment<T>(a, x, ldx, r0, k0, lane);
      };
      const auto rows_products = [&]<bool Exact16>() {
#pragma unroll
        for (int u = 0; u < row_units; ++u) {
          const int unit = warp + u * warps, r0 = 16 * (unit / (V / 8)), n0 = 8 * (unit % (V / 8));
#pragma unroll
          for (int s = 0; s < half / 16; s += 2) {
            std::uint32_t y[4], a0[4], a1[4];
            ldmatrix_x4<true>(y, &sh[16 * s + lane][n0]);  // k rows 16 s + lane, two k-steps
            a_fragment.template operator()<Exact16>(a0, rows->a, rows->lda, rows->a16, rows->lda16, r0,
                                                    h * half + 16 * s);
            a_fragment.template operator()<Exact16>(a1, rows->a, rows->lda, rows->a16, rows->lda16, r0,
                                                    h * half + 16 * s + 16);
            mma_16816<T>(racc[u], a0, y[0], y[1]);
            mma_16816<T>(racc[u], a1, y[2], y[3]);
          }
        }
      };
      if (rows) {
        if (rows->a16) rows_products.template operator()<true>();
        else rows_products.template operator()<false>();
      }
      if (warp < col_units) {
        const int r0 = 16 * (warp / (half / 8)), n0 = 8 * (warp % (half / 8));
        float acc[4] = {}, acc1[4] = {};  // the even and odd k-steps: two chains of dependent products
        const auto columns_products = [&]<bool Exact16>() {
#pragma unroll
          for (int s = 0; s < V / 16; s += 2) {
            std::uint32_t y[4], b0[4], b1[4];
            ldmatrix_x4(y, &sh[n0 + lane % 8][16 * s + 8 * (lane / 8)]);  // n rows, k columns: two k-steps
            a_fragment.template operator()<Exact16>(b0, cols.b, cols.ldb, cols.b16, cols.ldb16, r0, 16 * s);
            a_fragment.template operator()<Exact16>(b1, cols.b, cols.ldb, cols.b16, cols.ldb16, r0, 16 * s + 16);
            mma_16816<T>(acc, b0, y[0], y[1]);
            mma_16816<T>(acc1, b1, y[2], y[3]);
          }
        };
        if (cols.b16) columns_products.template operator()<true>();
        else columns_products.template operator()<false>();
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[e] += acc1[e];
        const int c = h * half + n0 + 2 * t;
        float part[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = r0 + g + 8 * i;
          const float f = cols.sign * cols.f[r], y0 = f * acc[2 * i], y1 = f * acc[2 * i + 1];
          float2& a = *reinterpret_cast<float2*>(cols.acc + r * cols.ldk + c);  // 8-byte accesses (c, ldk even)
          a = make_float2(a.x + y0, a.y + y1);
          float2 x;
          if (cols.rows16) {
            x = unpack2<T>(*reinterpret_cast<const std::uint32_t*>(cols.rows16 + r * cols.ldr16 + c));
            x.x *= cols.rows_scale, x.y *= cols.rows_scale;
          } else {
            x = *reinterpret_cast<const float2*>(cols.rows + r * cols.ldk + c);
          }
          part[i] = x.x * acc[2 * i] + x.y * acc[2 * i + 1];  // <rows, B S^T>: the factor after the sum
#pragma unroll
          for (int o = 1; o < 4; o <<= 1) part[i] += __shfl_xor_sync(0xffffffffu, part[i], o);
        }
        if (t == 0) st.dot_parts[r0 + g][c / 8] = part[0], st.dot_parts[r0 + g + 8][c / 8] = part[1];
      }
      // after the second half, or before `half` takes the next one (the resident halves are
      // apart, and so are the halves' dot_parts columns)
      if (h == 1 || slot == state_slot::streamed) __syncthreads();
    }
    if (rows) {
#pragma unroll
      for (int u = 0; u < row_units; ++u) {
        const int unit = warp + u * warps, r0 = 16 * (unit / (V / 8)), c = 8 * (unit % (V / 8)) + 2 * t;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = r0 + g + 8 * i;
          const float f = rows->sign * rows->f[r];
          float2& o = *reinterpret_cast<float2*>(rows->out + r * rows->ldo + c);  // 8-byte accesses (c, ldo even)
          const float2 y = make_float2(f * racc[u][2 * i], f * racc[u][2 * i + 1]);
          o = rows->assign ? y : make_float2(o.x + y.x, o.y + y.y);
        }
      }
    }
    if (tid < C) {
      float d = 0.0f;
#pragma unroll
      for (int i = 0; i < K / 8; ++i) d += st.dot_parts[tid][i];
      const float fd = cols.sign * cols.f[tid] * d;
      cols.dots[tid] = cols.add_dots ? cols.dots[tid] + fd : fd;
      if (cols.raw_dots) cols.raw_dots[tid] = d;
    }
    __syncthreads();
  }
}

}  // namespace linattn::cuda::detail
