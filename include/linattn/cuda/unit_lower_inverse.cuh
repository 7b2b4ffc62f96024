// SPDX-License-Identifier: MIT
/// \file
/// (I + A)^{-1} for a strictly lower triangular 64x64 A in fp32 shared memory (MATH.md §3.3,
/// blocked): the four 16x16 diagonal blocks are inverted by forward substitution, one warp
/// each, in registers; then the off-diagonal blocks follow diagonal by diagonal,
///   X_ij = -X_ii sum_{k=j}^{i-1} A_ik X_kj      (i > j),
/// each a few 16x16 products over the whole block: 7 barriers instead of 64.
#pragma once

namespace linattn::cuda::detail {

/// x = (I + a)^{-1}, both [64, ld*] fp32 in shared memory; `scratch` holds 3 * 16 * 17
/// floats. Runs on the whole block (at least 256 threads); ends synchronised.
__device__ inline void invert_unit_lower(const float* a, int lda, float* x, int ldx, float* scratch) {
  constexpr int n = 64, blk = 16, nb = n / blk;
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  // upper blocks are zero
  for (int e = tid; e < n * n; e += int(blockDim.x)) {
    const int r = e / n, c = e % n;
    if (c / blk > r / blk) x[r * ldx + c] = 0.0f;
  }
  // diagonal blocks: lane c < 16 of warp d solves column c of X_dd
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
  constexpr int lds = blk + 1;
  const int r = tid / blk, c = tid % blk;  // this thread's element of a 16x16 block
  const bool active = tid < blk * blk;
  for (int dist = 1; dist < nb; ++dist) {
    // Y_(j) = sum_{k=j}^{i-1} A_ik X_kj for every block (i = j + dist, j)
    for (int j = 0; active && j + dist < nb; ++j) {
      const int i = j + dist;
      float y = 0.0f;
      for (int k = j * blk; k < i * blk; ++k) y += a[(i * blk + r) * lda + k] * x[k * ldx + j * blk + c];
      scratch[j * blk * lds + r * lds + c] = y;
    }
    __syncthreads();
    // X_ij = -X_ii Y
    for (int j = 0; active && j + dist < nb; ++j) {
      const int i = j + dist;
      float v = 0.0f;
#pragma unroll
      for (int m = 0; m < blk; ++m) v += x[(i * blk + r) * ldx + i * blk + m] * scratch[j * blk * lds + m * lds + c];
      x[(i * blk + r) * ldx + j * blk + c] = -v;
    }
    __syncthreads();
  }
}

}  // namespace linattn::cuda::detail
