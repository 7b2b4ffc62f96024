// SPDX-License-Identifier: MIT
/// \file
/// (I + A)^{-1} for a strictly lower triangular 64x64 A in fp32 shared memory (docs/math.md#solving-for-t,
/// blocked): the four 16x16 diagonal blocks are inverted by forward substitution, one warp
/// each, in registers; then the off-diagonal blocks follow diagonal by diagonal,
///   X_ij = -X_ii sum_{k=j}^{i-1} A_ik X_kj      (i > j),
/// each a few 16x16 products (3xTF32 mma.sync) over the whole block: 4 barriers instead of 64.
#pragma once

#include "../tile/mma_sync.cuh"

namespace linattn::cuda::detail {

/// The four 16x16 diagonal blocks of x = (I + a)^{-1} (lane c < 16 of warp d solves column c
/// of X_dd by forward substitution) and zeros above them. Ends synchronised.
__device__ inline void invert_diagonal_blocks(const float* a, int lda, float* x, int ldx) {
  constexpr int n = 64, blk = 16, nb = n / blk;
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  for (int e = tid; e < n * n; e += int(blockDim.x)) {
    const int r = e / n, c = e % n;
    if (c / blk > r / blk) x[r * ldx + c] = 0.0f;
  }
  if (warp < nb && lane < blk) {
    const int d0 = warp * blk, c = lane;
    float col[blk];
#pragma unroll
    for (int r = 0; r < blk; ++r) {
      float v = r == c ? 1.0f : 0.0f;
#pragma unroll
      for (int j = 0; j < r; ++j) v -= a[(d0 + r) * lda + d0 + j] * col[j];
      col[r] = v;
    }
#pragma unroll
    for (int r = 0; r < blk; ++r) x[(d0 + r) * ldx + d0 + c] = col[r];
  }
  __syncthreads();
}

/// x = (I + a)^{-1}, both [64, ld*] fp32 in shared memory, with the off-diagonal block products
/// on tensor cores in 3xTF32 (fp32 accuracy): at distance d, warp 2 j + h forms the 8 columns h
/// of block (j + d, j). Runs on a block of at least 8 warps; `scratch` holds 8 x 16 x 8 floats;
/// ends synchronised.
__device__ inline void invert_unit_lower_tc(const float* a, int lda, float* x, int ldx, float* scratch) {
  constexpr int blk = 16, nb = 4;
  invert_diagonal_blocks(a, lda, x, ldx);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  float* ys = scratch + warp * blk * 8;  // [16, 8]
  for (int dist = 1; dist < nb; ++dist) {
    if (warp < 2 * (nb - dist)) {
      const int j = warp / 2, i = j + dist, c0 = j * blk + (warp % 2) * 8, r0 = i * blk;
      // Y = sum_{k=j}^{i-1} A_ik X_kj (columns c0..c0+7)
      float y[4] = {};
      for (int k0 = j * blk; k0 < i * blk; k0 += 8) {
        std::uint32_t ah[4], al[4], bh[2], bl[2];
        split_tf32(a[(r0 + g) * lda + k0 + t], ah[0], al[0]);
        split_tf32(a[(r0 + g + 8) * lda + k0 + t], ah[1], al[1]);
        split_tf32(a[(r0 + g) * lda + k0 + t + 4], ah[2], al[2]);
        split_tf32(a[(r0 + g + 8) * lda + k0 + t + 4], ah[3], al[3]);
        split_tf32(x[(k0 + t) * ldx + c0 + g], bh[0], bl[0]);
        split_tf32(x[(k0 + t + 4) * ldx + c0 + g], bh[1], bl[1]);
        mma_1688_3xtf32(y, ah, al, bh, bl);
      }
      ys[g * 8 + 2 * t] = y[0], ys[g * 8 + 2 * t + 1] = y[1];
      ys[(g + 8) * 8 + 2 * t] = y[2], ys[(g + 8) * 8 + 2 * t + 1] = y[3];
      __syncwarp();
      // X_ij = -X_ii Y
      float z[4] = {};
#pragma unroll
      for (int k0 = 0; k0 < blk; k0 += 8) {
        std::uint32_t ah[4], al[4], bh[2], bl[2];
        split_tf32(x[(r0 + g) * ldx + r0 + k0 + t], ah[0], al[0]);
        split_tf32(x[(r0 + g + 8) * ldx + r0 + k0 + t], ah[1], al[1]);
        split_tf32(x[(r0 + g) * ldx + r0 + k0 + t + 4], ah[2], al[2]);
        split_tf32(x[(r0 + g + 8) * ldx + r0 + k0 + t + 4], ah[3], al[3]);
        split_tf32(ys[(k0 + t) * 8 + g], bh[0], bl[0]);
        split_tf32(ys[(k0 + t + 4) * 8 + g], bh[1], bl[1]);
        mma_1688_3xtf32(z, ah, al, bh, bl);
      }
      x[(r0 + g) * ldx + c0 + 2 * t] = -z[0], x[(r0 + g) * ldx + c0 + 2 * t + 1] = -z[1];
      x[(r0 + g + 8) * ldx + c0 + 2 * t] = -z[2], x[(r0 + g + 8) * ldx + c0 + 2 * t + 1] = -z[3];
    }
    __syncthreads();
  }
}

}  // namespace linattn::cuda::detail
