// SPDX-License-Identifier: MIT
/// \file
/// A warp's 16 rows of mma.sync accumulators written in 16-byte pieces, staged through
/// shared-memory rows that the warp alone uses: as rows to a `[B, T, heads, D]` view
/// (store_warp_rows), or transposed to a row-major 16-bit matrix (store_warp_columns).
#pragma once

#include "../../core/tensor_view.hpp"
#include "load_store.cuh"
#include "mma_sync.cuh"

namespace linattn::cuda::detail {

/// The warp's accumulators o [16, 8 NT] (n-tile nt: the lane's elements at rows g and g + 8,
/// columns 8 nt + 2 t and 8 nt + 2 t + 1) go to out(b, t0 + r, h, v0 + j) for rows r < rows:
/// first into `stage` (16 rows of stride ld, 16-byte aligned, the warp's own and no longer
/// read), then back as 8-element pieces, so that each lane stores whole pieces of a row
/// (store8: one 16-byte store where `out`'s row is contiguous and aligned there, else element
/// by element). `Aligned` (16-bit T): the caller guarantees that every piece's place in `out`
/// is contiguous and 16-byte aligned, and each piece goes as it is, with no check and no
/// conversion; a sequential loop that stores a state per step keeps those instructions off
/// its chain (the two-pass forward's state pass measured 4–8 % slower with them).
template <class T, int NT, bool Aligned = false>
__device__ inline void store_warp_rows(const float (&o)[NT][4], T* stage, int ld, int lane, int rows,
                                       const tensor_view<T, 4>& out, index_t b, index_t t0, index_t h, index_t v0) {
  static_assert(!Aligned || sizeof(T) == 2, "whole 16-byte pieces of 8 16-bit elements");
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
    if constexpr (Aligned) {
      *reinterpret_cast<uint4*>(&out(b, t0 + r, h, v0 + j)) = *reinterpret_cast<const uint4*>(stage + r * ld + j);
    } else {
      float y[8];
      load8(stage + r * ld + j, y);
      store8(out, b, t0 + r, h, v0 + j, y);
    }
  }
}

/// The warp's accumulators x [16, 8 NT] (as in store_warp_rows), rounded to T (16-bit), go
/// transposed to `to` [8 NT, ld_to] row-major: to[i * ld_to + j] = x(j, i), 16 columns at a
/// time. From sm_90 each 16 x 16 piece goes through `stage` ([16][24] of T, the warp's own) by
/// one stmatrix.trans, then every lane stores one 16-byte piece (8 columns of one row of
/// `to`), so each store instruction writes whole 32-byte sectors of 16 rows: written element
/// by element from the fragments, the stores touched half sectors of 4 rows each, and such
/// partial writes load the L2 cache (bench/cuda/NOTES.md, session 49). Below sm_90 (no
/// stmatrix) the elements are stored one by one. `to` and ld_to must keep 16-byte rows. Only
/// rows i < `rows` of `to` are written, and only the 16-row pieces p with p % step == first
/// (warps that hold the same bits share the stores that way).
template <class T, int NT>
__device__ inline void store_warp_columns(const float (&x)[NT][4], T* to, index_t ld_to, T* stage, int lane,
                                          int rows = 8 * NT, int first = 0, int step = 1) {
  static_assert(sizeof(T) == 2 && NT % 2 == 0, "16-bit elements, whole 16-column pieces");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int ld = 24;  // 48-byte stage rows: stmatrix's rows and the 16-byte reads without bank conflicts
  const int m = lane / 8, c = lane % 8;
  const unsigned row = static_cast<unsigned>(__cvta_generic_to_shared(stage + (c + 8 * (m / 2)) * ld + 8 * (m % 2)));
  const int r = lane % 16, j = 8 * (lane / 16);  // the lane's piece: row r of the 16, columns j .. j + 7
#pragma unroll
  for (int p = 0; p < NT / 2; ++p) {
    if (p % step != first) continue;
    // matrices: x's rows 0-7 and 8-15 of n-tile 2p, then of 2p + 1; transposed, rows 0-7 and
    // 8-15 of the piece, columns 0-7 and 8-15
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(row),
                 "r"(pack2<T>(x[2 * p][0], x[2 * p][1])), "r"(pack2<T>(x[2 * p][2], x[2 * p][3])),
                 "r"(pack2<T>(x[2 * p + 1][0], x[2 * p + 1][1])), "r"(pack2<T>(x[2 * p + 1][2], x[2 * p + 1][3]))
                 : "memory");
    __syncwarp();
    if (16 * p + r < rows)
      *reinterpret_cast<uint4*>(to + index_t(16 * p + r) * ld_to + j) =
          *reinterpret_cast<const uint4*>(stage + r * ld + j);
    __syncwarp();
  }
#else
  (void)stage;
  for_tile_elements<8 * NT>(lane, [&](int nt, int e, int i, int j) {
    if (i < rows && (i / 16) % step == first) to[index_t(i) * ld_to + j] = from_float<T>(x[nt][e]);
  });
#endif
}

}  // namespace linattn::cuda::detail
