// SPDX-License-Identifier: MIT
/// \file
/// A warp's 16 rows of mma.sync accumulators written to a `[B, T, heads, D]` view in 16-byte
/// pieces, staged through shared-memory rows that the warp alone uses.
#pragma once

#include "../../core/tensor_view.hpp"
#include "load_store.cuh"
#include "mma_sync.cuh"

namespace linattn::cuda::detail {

/// The warp's accumulators o [16, 8 NT] (n-tile nt: the lane's elements at rows g and g + 8,
/// columns 8 nt + 2 t and 8 nt + 2 t + 1) go to out(b, t0 + r, h, v0 + j) for rows r < rows:
/// first into `stage` (16 rows of stride ld, the warp's own and no longer read), then back as
/// 16-byte pieces, so that each lane stores whole pieces of a row.
template <class T, int NT>
__device__ inline void store_warp_rows(const float (&o)[NT][4], T* stage, int ld, int lane, int rows,
                                       const tensor_view<T, 4>& out, index_t b, index_t t0, index_t h, index_t v0) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int half = 0; half < 2; ++half)
      store_pair(stage + (g + 8 * half) * ld, 8 * nt + 2 * t, o[nt][2 * half], o[nt][2 * half + 1]);
  __syncwarp();
  // NT 16-byte pieces per row
#pragma unroll
  for (int i = lane; i < 16 * NT; i += 32) {
    const int r = i / NT, j = (i % NT) * 8;
    if (r >= rows) continue;
    float y[8];
    load8(stage + r * ld + j, y);
    store8(out, b, t0 + r, h, v0 + j, y);
  }
}

}  // namespace linattn::cuda::detail
