// SPDX-License-Identifier: MIT
/// \file
/// Block-wide matrix products of fp32 tiles in shared memory on register mma.sync m16n8k16
/// products: each warp reads its fragments straight from the tiles, rounding them to the
/// 16-bit type T or splitting them into two such terms (mma_sync.cuh's fp32 fragment loads),
/// accumulates in fp32 registers and hands its results to the epilogue as they are, two
/// columns of two rows per lane. Nothing goes through a staged tile, so there is no per-warp
/// stage and no round trip through it (the WMMA products of block_gemm.cuh need both).
#pragma once

#include <cstdint>
#include <type_traits>

#include "block_gemm.cuh"
#include "mma_sync.cuh"

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

/// The operands of a product that hold values of its 16-bit type T exactly (rows as loaded
/// from inputs of type T): their lo terms are zero, so a split product skips the products with
/// them. The result is the same to the bit: those products only add zeros to the accumulator.
enum class exact_operands { none, a, b, both };

constexpr bool exact_a(exact_operands e) { return e == exact_operands::a || e == exact_operands::both; }
constexpr bool exact_b(exact_operands e) { return e == exact_operands::b || e == exact_operands::both; }

/// Fragment registers from float pairs: rounded to T (`split` false, lo untouched) or split
/// into hi + lo terms (split_pairs).
template <class T, bool split, int N>
__device__ inline void fp32_terms(std::uint32_t (&hi)[N], std::uint32_t (&lo)[N], const float2 (&x)[N]) {
  if constexpr (split) split_pairs<T>(hi, lo, x);
  else round_pairs<T>(hi, x);
}

/// d += a b for fp32 fragment pairs, in `Terms` 16-bit products: 1, both rounded to T; 3, both
/// split into hi + lo (split_pairs) and d += a_lo b_hi + a_hi b_lo + a_hi b_hi (about 16-bit
/// operands for bf16: finer than TF32's 11 bits, where one rounding to bf16 has 8), less the
/// product with the lo term of an operand that `Exact` names (it is zero; ah holds a, al is
/// not read, for an exact a).
template <class T, int Terms, exact_operands Exact = exact_operands::none>
__device__ inline void mma_fp32_pairs(float (&d)[4], const std::uint32_t (&ah)[4], const std::uint32_t (&al)[4],
                                      const float2 (&xb)[2]) {
  constexpr bool split_a = Terms == 3 && !exact_a(Exact), split_b = Terms == 3 && !exact_b(Exact);
  std::uint32_t bh[2], bl[2];
  fp32_terms<T, split_b>(bh, bl, xb);
  if constexpr (split_a) mma_16816<T>(d, al, bh[0], bh[1]);
  if constexpr (split_b) mma_16816<T>(d, ah, bl[0], bl[1]);
  mma_16816<T>(d, ah, bh[0], bh[1]);
}

/// C = A B with A [M, Kd] and B [Kd, N] fp32 in shared memory (layouts LA, LB), in 16-bit
/// products of T (`Terms` as for mma_fp32_pairs), in units of 16 rows x 8 NT columns spread
/// over the warps [first_warp, first_warp + warps) (NT = 2, one A fragment for two n-tiles,
/// for results wider than 32 columns; 1 for [C, C] results, so that more warps share them).
/// Each result element is passed once to the epilogue, as `epilogue(row, col, const float
/// (&v)[2])` for columns col, col + 1 (col even). `lower_a`: A is lower triangular, so a unit
/// stops at the k-step of its diagonal. No synchronisation inside: the caller synchronises
/// before (the operands complete) and after. `Exact`: the operands that hold values of T
/// exactly (mma_fp32_pairs).
template <class T, int Terms, class LA, class LB, int M, int N, int Kd, bool lower_a = false,
          exact_operands Exact = exact_operands::none, class Epilogue>
__device__ void warp_gemm(const float* A, int lda, const float* B, int ldb, Epilogue&& epilogue, int first_warp = 0,
                          int warps = -1) {
  static_assert(M % 16 == 0 && N % 8 == 0 && Kd % 16 == 0, "whole 16 x 8 x 16 tiles");
  static_assert(Terms == 1 || Terms == 3, "one rounded product or three split ones");
  constexpr int NT = N > 32 && N % 16 == 0 ? 2 : 1, units_n = N / (8 * NT), units = (M / 16) * units_n;
  constexpr int steps = Kd / 16;
  const int warp = int(threadIdx.x / 32) - first_warp, lane = int(threadIdx.x % 32);
  if (warps < 0) warps = int(blockDim.x / 32);
  if (warp < 0 || warp >= warps) return;
  const int g = lane / 4, t = lane % 4;
  for (int u = warp; u < units; u += warps) {
    const int r0 = 16 * (u / units_n), n0 = 8 * NT * (u % units_n);
    const int last = lower_a && r0 / 16 < steps ? r0 / 16 : steps - 1;  // the last k-step with nonzero A
    float acc[NT][4] = {};
#pragma unroll
    for (int s = 0; s < steps; ++s) {
      if (lower_a && s > last) continue;
      float2 xa[4];
      fp32_a_operand<LA>(xa, A, lda, r0, 16 * s, lane);
      std::uint32_t ah[4], al[4];
      fp32_terms<T, Terms == 3 && !exact_a(Exact)>(ah, al, xa);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        float2 xb[2];
        fp32_b_operand<LB>(xb, B, ldb, n0 + 8 * j, 16 * s, lane);
        mma_fp32_pairs<T, Terms, Exact>(acc[j], ah, al, xb);
      }
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const float top[2] = {acc[j][0], acc[j][1]}, bottom[2] = {acc[j][2], acc[j][3]};
      epilogue(r0 + g, n0 + 8 * j + 2 * t, top);
      epilogue(r0 + g + 8, n0 + 8 * j + 2 * t, bottom);
    }
  }
}

}  // namespace linattn::cuda::detail
