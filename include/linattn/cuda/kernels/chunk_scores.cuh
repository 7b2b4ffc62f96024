// SPDX-License-Identifier: MIT
/// \file
/// One chunk's scores for the output, formed by the warps of a state pass from the query and
/// key tiles it has already loaded (16-bit inputs, mma.sync):
///
///   scores = scale (Q K^T ⊙ Gam),   Gam_rj = exp(b_r - b_j) for j <= r, else 0     [C, C]
///
/// For the additive rules this is the chunk-local pass's only product, so a state pass that
/// forms it needs no chunk-local pass (and no [T, C] tile written and read back through
/// memory); the register-resident state pass does so for Hebbian and, on its one-warp groups,
/// ScalarDecay (chunk_state_mma.cuh). The arithmetic is the chunk-local pass's (chunk_local_mma.cuh): the
/// same k-step order, fp32 accumulators, then the mask and the scale, rounded once to T, so the
/// scores are the same bits either way.
#pragma once

#include "../tile/mma_sync.cuh"

namespace linattn::cuda::detail {

/// scores [C, lds] <- scale (Q K^T ⊙ Gam) from queries, keys [C, ldk] in shared memory, on
/// `Warps` (4 or 8) warps numbered `warp` = 0, 1, ... (the block's first ones by default; others
/// return): warp w forms the 16 rows of row block w % 4 and the column blocks w / 4,
/// w / 4 + Warps / 4, ... on or below the diagonal. Blocks above it are not written (the output
/// product reads the lower triangle only). `b`: the chunk's cumsum of the log gates in shared
/// memory, nullptr without a decay. The caller synchronises before reading.
template <int K, int Warps, class T>
__device__ void form_chunk_scores(const T* queries, const T* keys, int ldk, const float* b, float scale, T* scores,
                                  int lds, int warp = int(threadIdx.x) / 32) {
  static_assert(Warps == 4 || Warps == 8, "four row blocks over the warps");
  constexpr int step = Warps / 4, blocks = 4 / step;  // column blocks per warp, at most
  const int lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  if (warp >= Warps) return;
  const int rb = warp % 4, ch = warp / 4, r0 = 16 * rb;
  const ldm_lane al = ldm_lane::a_tile(lane), bl = ldm_lane::b_tiles(lane);
  float sc[2 * blocks][4] = {};  // [blocks][2 n-tiles]  column block ch + step m of the warp's rows
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
    std::uint32_t aq[4];
    ldmatrix_x4(aq, queries + (r0 + al.row) * ldk + 16 * ks + al.col);
#pragma unroll
    for (int m = 0; m < blocks; ++m) {
      const int p = ch + step * m;
      if (p > rb) continue;
      std::uint32_t bk[4];
      ldmatrix_x4(bk, keys + (16 * p + bl.row) * ldk + 16 * ks + bl.col);
      mma_pair<T>(sc[2 * m], sc[2 * m + 1], aq, bk);
    }
  }
#pragma unroll
  for (int ln = 0; ln < 2 * blocks; ++ln) {
    const int p = ch + step * (ln / 2), j = 16 * p + 8 * (ln % 2) + 2 * t;
    if (p > rb) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r0 + g + 8 * half;
      const float e0 = j <= r ? (b ? __expf(b[r] - b[j]) : 1.0f) : 0.0f;
      const float e1 = j + 1 <= r ? (b ? __expf(b[r] - b[j + 1]) : 1.0f) : 0.0f;
      store_pair(scores + r * lds, j, scale * sc[ln][2 * half] * e0, scale * sc[ln][2 * half + 1] * e1);
    }
  }
}

}  // namespace linattn::cuda::detail
