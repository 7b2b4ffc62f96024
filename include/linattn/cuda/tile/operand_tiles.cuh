// SPDX-License-Identifier: MIT
/// \file
/// Tiles of fp32 values stored the way a product policy reads them best, written a pair of
/// columns at a time (`store(r, c, x0, x1)`, c even) and handed to tile_product as operands
/// (`operand()`, stride `ld`):
///  - fp32_tile: an fp32 [R, Cols] tile (the WMMA policies; mma_16bit converts its fragments as
///    it reads them);
///  - split_tile: the two 16-bit terms of each value (split_pairs' hi and lo, the same bits),
///    in two [R, Cols] tiles of T, which warp_gemm reads by ldmatrix with no conversion. A left
///    operand that several units of a product share is split once where it is written instead
///    of once per unit that reads it.
#pragma once

#include <cstdint>
#include <type_traits>

#include "mma_sync.cuh"

namespace linattn::cuda::detail {

template <int R, int Cols>
struct fp32_tile {
  static constexpr int ld = Cols + 4;  // [R, Cols], rows 16-byte aligned
  float v[R][ld];

  __device__ void store(int r, int c, float x0, float x1) { *reinterpret_cast<float2*>(&v[r][c]) = make_float2(x0, x1); }
  __device__ const float* operand() const { return v[0]; }
};

template <class T, int R, int Cols>
struct split_tile {
  using type = T;
  static constexpr int ld = Cols + 8;  // 16-byte rows at an odd multiple of 16 bytes: conflict-free ldmatrix
  alignas(16) T hi[R][ld];             // [R, Cols]
  alignas(16) T lo[R][ld];             // [R, Cols]

  __device__ void store(int r, int c, float x0, float x1) {
    const float2 x[1] = {make_float2(x0, x1)};
    std::uint32_t h[1], l[1];
    split_pairs<T>(h, l, x);
    *reinterpret_cast<std::uint32_t*>(&hi[r][c]) = h[0];
    *reinterpret_cast<std::uint32_t*>(&lo[r][c]) = l[0];
  }
  __device__ const split_tile* operand() const { return this; }
};

template <class E>
inline constexpr bool is_split_tile = false;
template <class T, int R, int Cols>
inline constexpr bool is_split_tile<split_tile<T, R, Cols>> = true;

/// The epilogue that writes a product's pairs into an operand tile.
template <class Tile>
__device__ auto operand_epilogue(Tile& tile) {
  return [&tile]<int W>(int r, int j, const float (&v)[W]) {
    static_assert(W % 2 == 0, "pairs of columns");
#pragma unroll
    for (int e = 0; e < W; e += 2) tile.store(r, j + e, v[e], v[e + 1]);
  };
}

}  // namespace linattn::cuda::detail
