// SPDX-License-Identifier: MIT
/// \file
/// Warp-level tensor-core products with the operands in registers (PTX mma.sync m16n8k16,
/// 16-bit operands, fp32 accumulators) and the ldmatrix loads that fill them from shared
/// memory. Fragment layouts (lane = 4 g + t):
///
///   A [16, 16] row:   a0 = (g, 2t..2t+1)   a1 = (g+8, 2t..)   a2 = (g, 2t+8..)   a3 = (g+8, 2t+8..)
///   B [16, 8]  col:   b0 = (2t..2t+1, g)   b1 = (2t+8.., g)
///   C [16, 8]  f32:   c0, c1 = (g, 2t), (g, 2t+1)            c2, c3 = (g+8, 2t), (g+8, 2t+1)
///
/// so two neighbouring C tiles (columns 0-7 and 8-15) repack into one A tile without moving
/// data between lanes (`pack_a`).
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace linattn::cuda::detail {

/// Two floats as one register of two 16-bit values (`lo` in the low half).
template <class T>
__device__ inline std::uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  }
}

/// Stores columns j, j+1 of a contiguous row (workspace or shared memory; j even) as one
/// 4-byte store.
template <class T>
__device__ inline void store_pair(T* row, int j, float lo, float hi) {
  *reinterpret_cast<std::uint32_t*>(row + j) = pack2<T>(lo, hi);
}

/// The two 16-bit values of a register as floats.
template <class T>
__device__ inline float2 unpack2(std::uint32_t r) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r));
  else return __half22float2(*reinterpret_cast<const __half2*>(&r));
}

/// A fragment from two C tiles (columns 0-7 in `left`, 8-15 in `right`), each element times
/// the factor of its column: f[0], f[1] for columns 2t, 2t+1 of `left`, f[2], f[3] of `right`.
template <class T>
__device__ inline void pack_a(std::uint32_t (&a)[4], const float (&left)[4], const float (&right)[4],
                              const float (&f)[4]) {
  a[0] = pack2<T>(left[0] * f[0], left[1] * f[1]);
  a[1] = pack2<T>(left[2] * f[0], left[3] * f[1]);
  a[2] = pack2<T>(right[0] * f[2], right[1] * f[3]);
  a[3] = pack2<T>(right[2] * f[2], right[3] * f[3]);
}

template <class T>
__device__ inline void pack_a(std::uint32_t (&a)[4], const float (&left)[4], const float (&right)[4]) {
  pack_a<T>(a, left, right, {1.0f, 1.0f, 1.0f, 1.0f});
}

/// The float pairs of fragments read from fp32 tiles in shared memory, in register order
/// (a0..a3 of an A fragment, b0, b1 of a B fragment; lane = 4 g + t):
///  - `fp32_a_pairs`: A = rows [r0, r0 + 16), columns [k0, k0 + 16) of a row-major tile
///    (four 8-byte loads);
///  - `fp32_at_pairs`: A = the same block of the transpose of a tile stored [k, r]
///    (A(r, k) = tile[k][r]; eight 4-byte loads, conflict-free when ld is 4 modulo 32);
///  - `fp32_b_pairs`: B = n-tile [n0, n0 + 8), k-step [k0, k0 + 16) of a tile stored [n, k]
///    (two 8-byte loads);
///  - `fp32_kn_pairs`: the same B of a tile stored [k, n] (four 4-byte loads).
__device__ inline void fp32_a_pairs(float2 (&x)[4], const float* tile, int ld, int r0, int k0, int lane) {
  const int g = lane / 4, t = lane % 4;
  x[0] = *reinterpret_cast<const float2*>(tile + (r0 + g) * ld + k0 + 2 * t);
  x[1] = *reinterpret_cast<const float2*>(tile + (r0 + g + 8) * ld + k0 + 2 * t);
  x[2] = *reinterpret_cast<const float2*>(tile + (r0 + g) * ld + k0 + 2 * t + 8);
  x[3] = *reinterpret_cast<const float2*>(tile + (r0 + g + 8) * ld + k0 + 2 * t + 8);
}

/// Elements (r, c) and (r + 1, c) of a row-major fp32 tile: a pair along its columns.
__device__ inline float2 fp32_column_pair(const float* tile, int ld, int r, int c) {
  return make_float2(tile[r * ld + c], tile[(r + 1) * ld + c]);
}

__device__ inline void fp32_at_pairs(float2 (&x)[4], const float* tile, int ld, int r0, int k0, int lane) {
  const int g = lane / 4, t = lane % 4;
  x[0] = fp32_column_pair(tile, ld, k0 + 2 * t, r0 + g);
  x[1] = fp32_column_pair(tile, ld, k0 + 2 * t, r0 + g + 8);
  x[2] = fp32_column_pair(tile, ld, k0 + 2 * t + 8, r0 + g);
  x[3] = fp32_column_pair(tile, ld, k0 + 2 * t + 8, r0 + g + 8);
}

__device__ inline void fp32_b_pairs(float2 (&x)[2], const float* tile, int ld, int n0, int k0, int lane) {
  const float* row = tile + (n0 + lane / 4) * ld + k0 + 2 * (lane % 4);
  x[0] = *reinterpret_cast<const float2*>(row);
  x[1] = *reinterpret_cast<const float2*>(row + 8);
}

__device__ inline void fp32_kn_pairs(float2 (&x)[2], const float* tile, int ld, int n0, int k0, int lane) {
  const int g = lane / 4, t = lane % 4;
  x[0] = fp32_column_pair(tile, ld, k0 + 2 * t, n0 + g);
  x[1] = fp32_column_pair(tile, ld, k0 + 2 * t + 8, n0 + g);
}

/// Fragment registers from float pairs, each rounded to T.
template <class T, int N>
__device__ inline void round_pairs(std::uint32_t (&r)[N], const float2 (&x)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) r[i] = pack2<T>(x[i].x, x[i].y);
}

/// Fragment registers from float pairs as two 16-bit terms: hi = x rounded to T, lo = the
/// rounding of x - hi (x = hi + lo to about twice T's precision: 16 bits for bf16).
template <class T, int N>
__device__ inline void split_pairs(std::uint32_t (&hi)[N], std::uint32_t (&lo)[N], const float2 (&x)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    hi[i] = pack2<T>(x[i].x, x[i].y);
    const float2 h = unpack2<T>(hi[i]);
    lo[i] = pack2<T>(x[i].x - h.x, x[i].y - h.y);
  }
}

/// The A fragment of rows [r0, r0 + 16), columns [k0, k0 + 16) of a row-major fp32 tile in
/// shared memory, rounded to T, each element times the factor of its column (f as in pack_a:
/// columns k0 + 2t, +1, then k0 + 2t + 8, +9).
template <class T>
__device__ inline void fp32_a_fragment(std::uint32_t (&a)[4], const float* tile, int ld, int r0, int k0, int lane,
                                       const float (&f)[4]) {
  float2 x[4];
  fp32_a_pairs(x, tile, ld, r0, k0, lane);
  a[0] = pack2<T>(x[0].x * f[0], x[0].y * f[1]), a[1] = pack2<T>(x[1].x * f[0], x[1].y * f[1]);
  a[2] = pack2<T>(x[2].x * f[2], x[2].y * f[3]), a[3] = pack2<T>(x[3].x * f[2], x[3].y * f[3]);
}

template <class T>
__device__ inline void fp32_a_fragment(std::uint32_t (&a)[4], const float* tile, int ld, int r0, int k0, int lane) {
  fp32_a_fragment<T>(a, tile, ld, r0, k0, lane, {1.0f, 1.0f, 1.0f, 1.0f});
}

/// The B fragment (b0, b1) of n-tile [n0, n0 + 8), k-step [k0, k0 + 16) of an fp32 tile
/// stored [n, k] (row-major, row stride ld), rounded to T: two 8-byte loads per lane.
template <class T>
__device__ inline void fp32_b_fragment(std::uint32_t& b0, std::uint32_t& b1, const float* tile, int ld, int n0, int k0,
                                       int lane) {
  float2 x[2];
  fp32_b_pairs(x, tile, ld, n0, k0, lane);
  b0 = pack2<T>(x[0].x, x[0].y), b1 = pack2<T>(x[1].x, x[1].y);
}

/// Each element of an A fragment times the factor of its column (f as in pack_a).
template <class T>
__device__ inline void scale_a(std::uint32_t (&a)[4], const float (&f)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = unpack2<T>(a[i]);
    a[i] = pack2<T>(x.x * f[2 * (i / 2)], x.y * f[2 * (i / 2) + 1]);
  }
}

/// d += a b on one 16x8x16 tile.
template <class T>
__device__ inline void mma_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// The lane's elements of a [16, Cols] accumulator tile (Cols / 8 C tiles): f(nt, e, i, j) for
/// element e of n-tile nt, column i = 8 nt + 2t + (e & 1), row j = g + 8 (e >> 1). For a
/// transposed state tile Ht [16, K] of a warp (keys from k0, values from vw): the element of
/// key k0 + i, value vw + j.
template <int Cols, class F>
__device__ inline void for_tile_elements(int lane, F&& f) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < Cols / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) f(nt, e, 8 * nt + 2 * t + (e & 1), g + 8 * (e >> 1));
}

/// The lane's four accumulators of a C tile as one float4 (a 16-byte shared-memory access).
__device__ inline float4 as_float4(const float (&x)[4]) { return make_float4(x[0], x[1], x[2], x[3]); }

/// x = the sum of Split partial C tiles as float4, the lane's at `first` and every `stride`
/// float4 after it, added in that order (every warp adding them holds the same bits).
template <int Split>
__device__ inline void sum_partial_tiles(float (&x)[4], const float4* first, int stride) {
  float4 sum = first[0];
#pragma unroll
  for (int w = 1; w < Split; ++w) {
    const float4 y = first[w * stride];
    sum.x += y.x, sum.y += y.y, sum.z += y.z, sum.w += y.w;
  }
  x[0] = sum.x, x[1] = sum.y, x[2] = sum.z, x[3] = sum.w;
}

/// d0 += a (b[0], b[1]) and d1 += a (b[2], b[3]): one A fragment times the two n-tiles of an
/// ldmatrix_x4 (b_tiles, or kn_tiles with Trans).
template <class T>
__device__ inline void mma_pair(float (&d0)[4], float (&d1)[4], const std::uint32_t (&a)[4],
                                const std::uint32_t (&b)[4]) {
  mma_16816<T>(d0, a, b[0], b[1]);
  mma_16816<T>(d1, a, b[2], b[3]);
}

/// x as a TF32 pair: hi = x rounded to TF32, lo = the TF32 rounding of the rest.
__device__ inline void split_tf32(float x, std::uint32_t& hi, std::uint32_t& lo) {
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(hi) : "f"(x));
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(lo) : "f"(x - __uint_as_float(hi)));
}

/// d += a b on one 16x8x8 tile of fp32 operands given as TF32 pairs, in three products
/// (a_lo b_hi + a_hi b_lo + a_hi b_hi), which keeps fp32 accuracy. TF32 fragments (lane = 4 g + t):
/// A [16, 8]: a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4); B [8, 8]: b0 = (t, g),
/// b1 = (t+4, g); C as for m16n8k16.
__device__ inline void mma_1688_3xtf32(float (&d)[4], const std::uint32_t (&ah)[4], const std::uint32_t (&al)[4],
                                       const std::uint32_t (&bh)[2], const std::uint32_t (&bl)[2]) {
  const auto one = [&](const std::uint32_t (&x)[4], const std::uint32_t (&y)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(y[0]), "r"(y[1]));
  };
  one(al, bh);
  one(ah, bl);
  one(ah, bh);
}

/// Four 8x8 16-bit matrices from shared memory; lane i gives the address of row i % 8 of
/// matrix i / 8 and receives element (lane / 4, 2 (lane % 4) ..+1) of each matrix in r[0..3]
/// (`Trans`: element (2 (lane % 4) ..+1, lane / 4), i.e. of the transposed matrix).
template <bool Trans = false>
__device__ inline void ldmatrix_x4(std::uint32_t (&r)[4], const void* row) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
}

/// Two 8x8 16-bit matrices from shared memory: lanes 0-15 give the row addresses (lane i: row
/// i % 8 of matrix i / 8; the other lanes' are not read) and every lane receives its element of
/// each in r[0], r[1] as ldmatrix_x4 does.
template <bool Trans = false>
__device__ inline void ldmatrix_x2(std::uint32_t (&r)[2], const void* row) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(s)
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(s)
                 : "memory");
}

/// mma_pair with the two n-tiles loaded first, by one ldmatrix_x4<Trans> at the lane's `row`.
template <class T, bool Trans = false>
__device__ inline void mma_pair_ldm(float (&d0)[4], float (&d1)[4], const std::uint32_t (&a)[4], const void* row) {
  std::uint32_t b[4];
  ldmatrix_x4<Trans>(b, row);
  mma_pair<T>(d0, d1, a, b);
}

/// Lane offsets (row, column) into a row-major tile for one ldmatrix_x4 that yields
///  - `a_tile`: the A fragment of a [16, 16] tile;
///  - `b_tiles`: the B fragments of two n-tiles (rows = n, columns = k: r = {b0, b1} of n-tile 0,
///    then of n-tile 1), or, with Trans, C-layout pairs of a [k, n] tile read transposed;
///  - `kn_tiles` (Trans): the B fragments of two n-tiles from a tile stored [k, n].
struct ldm_lane {
  int row, col;
  __device__ static ldm_lane a_tile(int lane) { return {lane % 16, (lane / 16) * 8}; }
  __device__ static ldm_lane b_tiles(int lane) { return {(lane % 8) + (lane / 16) * 8, ((lane / 8) % 2) * 8}; }
  __device__ static ldm_lane kn_tiles(int lane) { return {(lane % 8) + ((lane / 8) % 2) * 8, (lane / 16) * 8}; }
};

/// acc[16, 8 NT] += A B over k-steps [0, steps) (steps <= Steps; a causal product stops
/// early): A the warp's 16 rows of a row-major tile at `a` (row stride lda), B rows [0, 16 steps)
/// of a row-major [k, n] tile at `b` (row stride ldb), n-tiles in pairs.
template <class T, int NT, int Steps>
__device__ inline void mma_rows_kn(float (&acc)[NT][4], const T* a, int lda, const T* b, int ldb, int lane,
                                   int steps = Steps) {
  static_assert(NT % 2 == 0, "n-tiles in pairs");
  const ldm_lane al = ldm_lane::a_tile(lane), kl = ldm_lane::kn_tiles(lane);
#pragma unroll
  for (int s = 0; s < Steps; ++s) {
    if (s >= steps) continue;
    std::uint32_t x[4];
    ldmatrix_x4(x, a + al.row * lda + 16 * s + al.col);
#pragma unroll
    for (int p = 0; p < NT / 2; ++p)
      mma_pair_ldm<T, true>(acc[2 * p], acc[2 * p + 1], x, b + (16 * s + kl.row) * ldb + 16 * p + kl.col);
  }
}

}  // namespace linattn::cuda::detail
