// SPDX-License-Identifier: MIT
/// \file
/// Thread-block matrix products on tensor cores (WMMA), fp32 operands in shared memory, fp32
/// accumulation, results handed element by element to an epilogue (the kernels for fp32
/// inputs). Each step is three TF32 products (a = a_hi + a_lo, a*b ~ a_hi*b_hi + a_hi*b_lo +
/// a_lo*b_hi), which keeps fp32 inputs within fp32 accuracy instead of TF32's ~1e-3.
#pragma once

#include <mma.h>

#include <type_traits>

namespace linattn::cuda::detail {

namespace wmma = nvcuda::wmma;

using row_major = wmma::row_major;
using col_major = wmma::col_major;

/// Fragment types and one k-step of C += A B for a precision of fp32 operands: `float`, three
/// TF32 products (fp32 accuracy), or `single_tf32`, one. (The 16-bit forward kernels use the
/// register-resident mma.sync tiles of mma_sync.cuh instead.)
template <class Op>
struct mma_traits;

/// The TF32 fragments both fp32 precisions load their operands into.
struct tf32_fragments {
  using operand = float;
  static constexpr int k_step = 8;
  template <class Layout>
  using frag_a = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, Layout>;
  template <class Layout>
  using frag_b = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, Layout>;
};

template <>
struct mma_traits<float> : tf32_fragments {

  /// Splits x into hi (x rounded to TF32) and lo (the TF32 rounding of the rest).
  template <class Frag>
  __device__ static void split(Frag& hi, Frag& lo) {
#pragma unroll
    for (int i = 0; i < hi.num_elements; ++i) {
      const float x = hi.x[i];
      const float h = wmma::__float_to_tf32(x);
      hi.x[i] = h;
      lo.x[i] = wmma::__float_to_tf32(x - h);
    }
  }

  template <class LA, class LB, class Acc>
  __device__ static void step(Acc& c, const float* a, unsigned lda, const float* b, unsigned ldb) {
    frag_a<LA> a_hi, a_lo;
    frag_b<LB> b_hi, b_lo;
    wmma::load_matrix_sync(a_hi, a, lda);
    wmma::load_matrix_sync(b_hi, b, ldb);
    split(a_hi, a_lo);
    split(b_hi, b_lo);
    wmma::mma_sync(c, a_lo, b_hi, c);
    wmma::mma_sync(c, a_hi, b_lo, c);
    wmma::mma_sync(c, a_hi, b_hi, c);
  }
};

/// fp32 operands rounded once to TF32 (one product per step, ~1e-3 relative): for operands
/// that come from 16-bit inputs, whose own rounding is coarser.
struct single_tf32 {};

template <>
struct mma_traits<single_tf32> : tf32_fragments {
  template <class LA, class LB, class Acc>
  __device__ static void step(Acc& c, const float* a, unsigned lda, const float* b, unsigned ldb) {
    frag_a<LA> fa;
    frag_b<LB> fb;
    wmma::load_matrix_sync(fa, a, lda);
    wmma::load_matrix_sync(fb, b, ldb);
#pragma unroll
    for (int i = 0; i < fa.num_elements; ++i) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
#pragma unroll
    for (int i = 0; i < fb.num_elements; ++i) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
    wmma::mma_sync(c, fa, fb, c);
  }
};

/// Offset of element (r, c) in a matrix stored with the given layout and leading dimension.
template <class Layout>
__device__ constexpr unsigned offset(unsigned r, unsigned c, unsigned ld) {
  if constexpr (std::is_same_v<Layout, row_major>) return r * ld + c;
  else return r + c * ld;
}

/// Per-warp scratch for one 16x16 fp32 tile (leading dimension 20 keeps rows 32-byte aligned
/// and spreads them over the banks).
inline constexpr int stage_ld = 20;
inline constexpr int stage_floats = 16 * stage_ld;

/// C = A B with A [M, Kd] and B [Kd, N] in shared memory (layouts LA, LB), computed in 16x16
/// tiles spread over the block's warps; each result element is passed once to the epilogue,
/// eight consecutive columns of a row at a time: `epilogue(row, col, const float (&v)[8])`
/// covers columns col..col+7 (col a multiple of 8). `lower_a` skips the k-blocks above the diagonal of a lower
/// triangular A; `lower_c` computes only the tiles on and below the diagonal of C (the caller
/// never reads the others). `stage` is the block's scratch: stage_floats floats per warp.
template <class Op, class LA, class LB, int M, int N, int Kd, bool lower_a = false, bool lower_c = false, class Epilogue>
__device__ void block_gemm(const typename mma_traits<Op>::operand* A, unsigned lda,
                           const typename mma_traits<Op>::operand* B, unsigned ldb, float* stage,
                           Epilogue&& epilogue, int first_warp = 0, int warps = -1) {
  static_assert(M % 16 == 0 && N % 16 == 0 && Kd % 16 == 0, "tile sizes must be multiples of 16");
  using traits = mma_traits<Op>;
  constexpr int tiles_n = N / 16;
  constexpr int tiles = lower_c ? (M / 16) * (M / 16 + 1) / 2 : (M / 16) * tiles_n;
  static_assert(!lower_c || M == N, "lower_c needs a square C");
  const int warp = static_cast<int>(threadIdx.x / 32) - first_warp;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (warps < 0) warps = static_cast<int>(blockDim.x / 32);
  if (warp < 0 || warp >= warps) return;
  float* my_stage = stage + (first_warp + warp) * stage_floats;
  for (int t = warp; t < tiles; t += warps) {
    unsigned i0 = (t / tiles_n) * 16, j0 = (t % tiles_n) * 16;
    if constexpr (lower_c) {  // t-th tile of the lower triangle, row by row
      unsigned row = 0;
      while ((row + 1) * (row + 2) / 2 <= unsigned(t)) ++row;
      i0 = row * 16, j0 = (unsigned(t) - row * (row + 1) / 2) * 16;
    }
    wmma::fragment<wmma::accumulator, 16, 16, traits::k_step, float> c;
    wmma::fill_fragment(c, 0.0f);
    if constexpr (lower_a) {
      const unsigned k_end = i0 + 16 < unsigned(Kd) ? i0 + 16 : unsigned(Kd);
      for (unsigned k0 = 0; k0 < k_end; k0 += traits::k_step)
        traits::template step<LA, LB>(c, A + offset<LA>(i0, k0, lda), lda, B + offset<LB>(k0, j0, ldb), ldb);
    } else {
      // unrolled, so the operand loads of later steps (some from global memory) issue early
#pragma unroll
      for (unsigned k0 = 0; k0 < unsigned(Kd); k0 += traits::k_step)
        traits::template step<LA, LB>(c, A + offset<LA>(i0, k0, lda), lda, B + offset<LB>(k0, j0, ldb), ldb);
    }
    wmma::store_matrix_sync(my_stage, c, stage_ld, wmma::mem_row_major);
    __syncwarp();
    const int r = lane / 2, c0 = (lane % 2) * 8;
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = my_stage[r * stage_ld + c0 + e];
    epilogue(int(i0) + r, int(j0) + c0, v);
    __syncwarp();
  }
}

/// C = A B as block_gemm, for products with fewer 16x16 tiles of C than warps (short and wide
/// Kd): each tile's Kd is split over warps / tiles warps, whose partial tiles are summed in a
/// fixed order (the same bits on every run) and handed to the epilogue as block_gemm does.
/// Runs on the whole block (it synchronises inside: every thread must call it); the tiles
/// must divide the warps and Kd / (warps / tiles) must be a multiple of 8. The caller
/// synchronises before the block reads what the epilogue wrote or reuses `stage`.
template <class Op, class LA, class LB, int M, int N, int Kd, class Epilogue>
__device__ void block_gemm_split_k(const typename mma_traits<Op>::operand* A, unsigned lda,
                                   const typename mma_traits<Op>::operand* B, unsigned ldb, float* stage,
                                   Epilogue&& epilogue) {
  static_assert(M % 16 == 0 && N % 16 == 0 && Kd % 16 == 0, "tile sizes must be multiples of 16");
  using traits = mma_traits<Op>;
  constexpr int tiles_n = N / 16, tiles = (M / 16) * tiles_n;
  const int warps = int(blockDim.x / 32), warp = int(threadIdx.x / 32);
  const int per_tile = warps / tiles, span = Kd / per_tile;
  if (warp < tiles * per_tile) {
    const int t = warp / per_tile, part = warp % per_tile;
    const unsigned i0 = unsigned(t / tiles_n) * 16, j0 = unsigned(t % tiles_n) * 16;
    wmma::fragment<wmma::accumulator, 16, 16, traits::k_step, float> c;
    wmma::fill_fragment(c, 0.0f);
    for (unsigned k0 = unsigned(part * span); k0 < unsigned((part + 1) * span); k0 += traits::k_step)
      traits::template step<LA, LB>(c, A + offset<LA>(i0, k0, lda), lda, B + offset<LB>(k0, j0, ldb), ldb);
    wmma::store_matrix_sync(stage + warp * stage_floats, c, stage_ld, wmma::mem_row_major);
  }
  __syncthreads();
  for (int g = int(threadIdx.x); g < tiles * 32; g += int(blockDim.x)) {
    const int t = g / 32, r = (g % 32) / 2, c0 = (g % 2) * 8;
    float v[8] = {};
    for (int p = 0; p < per_tile; ++p) {
      const float* part = stage + (t * per_tile + p) * stage_floats + r * stage_ld + c0;
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] += part[e];
    }
    epilogue((t / tiles_n) * 16 + r, (t % tiles_n) * 16 + c0, v);
  }
}

}  // namespace linattn::cuda::detail
