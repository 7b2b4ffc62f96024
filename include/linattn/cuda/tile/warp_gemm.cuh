// SPDX-License-Identifier: MIT
/// \file
/// Block-wide matrix products of tiles in shared memory on register mma.sync m16n8k16
/// products: each warp reads its fragments straight from the tiles, accumulates in fp32
/// registers and hands its results to the epilogue as they are, two columns of two rows per
/// lane. An operand is an fp32 tile, whose fragments are rounded to the 16-bit type T or split
/// into two such terms as they are read (mma_sync.cuh's fp32 fragment loads), or a tile of T
/// holding its values exactly (rows as loaded), read by ldmatrix with no conversion. Nothing goes
/// through a staged tile, so there is no per-warp stage and no round trip through it (the WMMA
/// products of block_gemm.cuh need both), unless the epilogue asks for a warp's results whole
/// (a unit epilogue) to stage them itself.
#pragma once

#include <cstdint>
#include <type_traits>

#include "block_gemm.cuh"
#include "mma_sync.cuh"
#include "operand_tiles.cuh"

namespace linattn::cuda::detail {

/// The float pairs of the A fragment of rows [r0, r0 + 16), k-step [k0, k0 + 16) of an fp32
/// operand stored with layout L (row_major: [M, Kd]; col_major: [Kd, M]).
template <class L>
__device__ inline void fp32_a_operand(float2 (&x)[4], const float* A, int lda, int r0, int k0, int lane) {
  if constexpr (std::is_same_v<L, row_major>) fp32_a_pairs(x, A, lda, r0, k0, lane);
  else fp32_at_pairs(x, A, lda, r0, k0, lane);
}

/// The float pairs of the B fragment of n-tile [n0, n0 + 8), k-step [k0, k0 + 16) of an fp32
/// operand stored with layout L (row_major: [Kd, N]; col_major: [N, Kd]).
template <class L>
__device__ inline void fp32_b_operand(float2 (&x)[2], const float* B, int ldb, int n0, int k0, int lane) {
  if constexpr (std::is_same_v<L, row_major>) fp32_kn_pairs(x, B, ldb, n0, k0, lane);
  else fp32_b_pairs(x, B, ldb, n0, k0, lane);
}

/// The A fragment of rows [r0, r0 + 16), k-step [k0, k0 + 16) of a 16-bit tile stored
/// [M, Kd] (row_major) or [Kd, M] (col_major: read transposed): one ldmatrix_x4, rows 16-byte
/// aligned.
template <class L, class E>
__device__ inline void half_a_operand(std::uint32_t (&a)[4], const E* A, int lda, int r0, int k0, int lane) {
  if constexpr (std::is_same_v<L, row_major>) {
    const ldm_lane l = ldm_lane::a_tile(lane);
    ldmatrix_x4(a, A + (r0 + l.row) * lda + k0 + l.col);
  } else {
    // the four 8 x 8 blocks (rows r0.., k0..), (r0 + 8.., k0..), (r0.., k0 + 8..), (r0 + 8.., k0 + 8..)
    // are stored at rows k0 (+ 8) and columns r0 (+ 8) of the transpose
    const ldm_lane l = ldm_lane::b_tiles(lane);
    ldmatrix_x4<true>(a, A + (k0 + l.row) * lda + r0 + l.col);
  }
}

/// The B fragment (b0, b1) of n-tile [n0, n0 + 8), k-step [k0, k0 + 16) of a 16-bit tile
/// stored [Kd, N] (row_major: read transposed) or [N, Kd] (col_major): one ldmatrix_x2.
template <class L, class E>
__device__ inline void half_b_operand(std::uint32_t (&b)[2], const E* B, int ldb, int n0, int k0, int lane) {
  if constexpr (std::is_same_v<L, row_major>) ldmatrix_x2<true>(b, B + (k0 + lane % 16) * ldb + n0);
  else ldmatrix_x2(b, B + (n0 + lane % 8) * ldb + k0 + 8 * ((lane / 8) % 2));
}

/// The operands of a product that hold values of its 16-bit type T exactly (rows as loaded
/// from inputs of type T): their lo terms are zero, so a split product skips the products with
/// them. The result is the same to the bit: those products only add zeros to the accumulator.
enum class exact_operands { none, a, b, both };

constexpr bool exact_a(exact_operands e) { return e == exact_operands::a || e == exact_operands::both; }
constexpr bool exact_b(exact_operands e) { return e == exact_operands::b || e == exact_operands::both; }

/// An epilogue that takes a warp's results a unit at a time: `epilogue.unit(r0, n0, acc)` with
/// acc [16, 8 NT] at rows r0 .., columns n0 .. in the mma.sync accumulator layout (n-tile nt:
/// the lane's elements at rows g and g + 8, columns 8 nt + 2 t and 8 nt + 2 t + 1), for stores
/// that gather a unit before it leaves (warp_rows_store.cuh). warp_gemm hands such an epilogue
/// its units instead of pairs.
template <class E, int NT>
concept unit_epilogue = requires(const E& e, const float (&acc)[NT][4]) { e.unit(0, 0, acc); };

/// Fragment registers from float pairs: rounded to T (`split` false, lo untouched) or split
/// into hi + lo terms (split_pairs).
template <class T, bool split, int N>
__device__ inline void fp32_terms(std::uint32_t (&hi)[N], std::uint32_t (&lo)[N], const float2 (&x)[N]) {
  if constexpr (split) split_pairs<T>(hi, lo, x);
  else round_pairs<T>(hi, x);
}

/// C = A B with A [M, Kd] and B [Kd, N] in shared memory (layouts LA, LB), in 16-bit products
/// of T, in units of 16 rows x 8 NT columns spread over the warps [first_warp, first_warp +
/// warps) (NT = 2, one A fragment for two n-tiles, for results wider than 32 columns; 1 for
/// [C, C] results, so that more warps share them). Each operand is an fp32 tile (EA or EB
/// float) or a tile of T (EA or EB = T, 16-byte aligned rows) holding its values exactly; A may
/// also be a split_tile of T (operand_tiles.cuh: an fp32 operand split once where it was
/// written; `lda` unused). `Terms` says how fp32 operands become 16-bit ones: 1, rounded to T;
/// 3, split into hi + lo (split_pairs) with d += a_lo b_hi + a_hi b_lo + a_hi b_hi per step
/// (about 16-bit operands for bf16: finer than TF32's 11 bits, where one rounding to bf16 has
/// 8), less the product with the lo term of an operand that is a tile of T or that `Exact`
/// names (it is zero). Each result element is passed once to the epilogue, as
/// `epilogue(row, col, const float (&v)[2])` for columns col, col + 1 (col even), or a unit at a
/// time to a unit epilogue.
/// `lower_a`: A is lower triangular, so a unit stops at the k-step of its diagonal. With NT = 1
/// a unit keeps its even and odd k-steps in two accumulators, added at the end: two chains of
/// dependent products where one would run Terms · Kd / 16 of them in a row. No synchronisation
/// inside: the caller synchronises before (the operands complete) and after.
template <class T, int Terms, class LA, class LB, int M, int N, int Kd, bool lower_a = false,
          exact_operands Exact = exact_operands::none, class EA, class EB, class Epilogue>
__device__ void warp_gemm(const EA* A, int lda, const EB* B, int ldb, Epilogue&& epilogue, int first_warp = 0,
                          int warps = -1) {
  static_assert(M % 16 == 0 && N % 8 == 0 && Kd % 16 == 0, "whole 16 x 8 x 16 tiles");
  static_assert(Terms == 1 || Terms == 3, "one rounded product or three split ones");
  constexpr bool fp32_a = std::is_same_v<EA, float>, fp32_b = std::is_same_v<EB, float>;
  constexpr bool presplit_a = is_split_tile<EA>;
  static_assert(fp32_a || std::is_same_v<EA, T> || presplit_a, "A: an fp32 tile, a tile of T or a split_tile of T");
  static_assert(fp32_b || std::is_same_v<EB, T>, "B: an fp32 tile or a tile of T");
  if constexpr (presplit_a) static_assert(std::is_same_v<typename EA::type, T>, "a split_tile of T");
  constexpr bool split_a = Terms == 3 && (fp32_a || presplit_a) && !exact_a(Exact);
  constexpr bool split_b = Terms == 3 && fp32_b && !exact_b(Exact);
  constexpr int NT = N > 32 && N % 16 == 0 ? 2 : 1, units_n = N / (8 * NT), units = (M / 16) * units_n;
  constexpr int steps = Kd / 16;
  const int warp = int(threadIdx.x / 32) - first_warp, lane = int(threadIdx.x % 32);
  if (warps < 0) warps = int(blockDim.x / 32);
  if (warp < 0 || warp >= warps) return;
  const int g = lane / 4, t = lane % 4;
  for (int u = warp; u < units; u += warps) {
    const int r0 = 16 * (u / units_n), n0 = 8 * NT * (u % units_n);
    const int last = lower_a && r0 / 16 < steps ? r0 / 16 : steps - 1;  // the last k-step with nonzero A
    // NT = 1: the even and odd k-steps in two accumulators, two chains of dependent products
    constexpr int chains = NT == 1 && steps > 1 ? 2 : 1;
    float acc[NT * chains][4] = {};
#pragma unroll
    for (int s = 0; s < steps; ++s) {
      if (lower_a && s > last) continue;
      std::uint32_t ah[4], al[4];
      if constexpr (fp32_a) {
        float2 xa[4];
        fp32_a_operand<LA>(xa, A, lda, r0, 16 * s, lane);
        fp32_terms<T, split_a>(ah, al, xa);
      } else if constexpr (presplit_a) {
        half_a_operand<LA>(ah, A->hi[0], EA::ld, r0, 16 * s, lane);
        if constexpr (split_a) half_a_operand<LA>(al, A->lo[0], EA::ld, r0, 16 * s, lane);
      } else {
        half_a_operand<LA>(ah, A, lda, r0, 16 * s, lane);
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        std::uint32_t bh[2], bl[2];
        if constexpr (fp32_b) {
          float2 xb[2];
          fp32_b_operand<LB>(xb, B, ldb, n0 + 8 * j, 16 * s, lane);
          fp32_terms<T, split_b>(bh, bl, xb);
        } else {
          half_b_operand<LB>(bh, B, ldb, n0 + 8 * j, 16 * s, lane);
        }
        float (&d)[4] = acc[chains == 2 ? s % 2 : j];
        if constexpr (split_a) mma_16816<T>(d, al, bh[0], bh[1]);
        if constexpr (split_b) mma_16816<T>(d, ah, bl[0], bl[1]);
        mma_16816<T>(d, ah, bh[0], bh[1]);
      }
    }
    if constexpr (chains == 2)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[0][e] += acc[1][e];
    if constexpr (unit_epilogue<std::remove_cvref_t<Epilogue>, NT>) {
      epilogue.unit(r0, n0, reinterpret_cast<const float(&)[NT][4]>(acc));  // the first NT rows of acc
    } else {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float top[2] = {acc[j][0], acc[j][1]}, bottom[2] = {acc[j][2], acc[j][3]};
        epilogue(r0 + g, n0 + 8 * j + 2 * t, top);
        epilogue(r0 + g + 8, n0 + 8 * j + 2 * t, bottom);
      }
    }
  }
}

}  // namespace linattn::cuda::detail
