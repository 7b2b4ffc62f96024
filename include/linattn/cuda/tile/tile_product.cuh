// SPDX-License-Identifier: MIT
/// \file
/// A block-wide product of fp32 tiles in shared memory taken the way its precision policy `Op`
/// says: `float` or `single_tf32` as WMMA products through a per-warp stage (block_gemm.cuh),
/// `mma_16bit<T, Terms>` as register mma.sync products of the 16-bit type T (warp_gemm.cuh). The epilogue takes any width, `epilogue(row, col, const float (&v)[W])`
/// for columns col .. col + W - 1: W = 8 from block_gemm, 2 from warp_gemm. Kernels written
/// against these two calls keep one body for every input type.
#pragma once

#include <type_traits>

#include "block_gemm.cuh"
#include "warp_gemm.cuh"

namespace linattn::cuda::detail {

/// Precision policy: fp32 tiles whose operands become 16-bit fragments of T as each warp reads
/// them, rounded once (Terms = 1) or split into hi + lo terms with three products per step
/// (Terms = 3: about 16-bit operands for bf16, finer than one TF32 product).
template <class T, int Terms>
struct mma_16bit {
  using type = T;
  static constexpr int terms = Terms;
};

template <class Op>
inline constexpr bool is_mma_16bit = false;
template <class T, int Terms>
inline constexpr bool is_mma_16bit<mma_16bit<T, Terms>> = true;

/// The padding, in floats, of the rows of the fp32 [C, K] and [C, V] tiles whose products a
/// policy takes. mma_16bit reads them mostly as 8-byte pairs along a row (fp32_a_pairs,
/// fp32_b_pairs: lane 4 g + t at row g, column 2 t), which a half warp serves in one wavefront
/// when the row stride is 8 modulo the 32 banks (4 puts rows g and g + 1 on the same banks:
/// two wavefronts). Its pairs down a column (fp32_kn_pairs) then take two, but they are the
/// fewer reads. The WMMA policies keep 4.
template <class Op>
inline constexpr int row_pad = is_mma_16bit<Op> ? 8 : 4;

/// The tile that a policy's products read an fp32 left operand [R, Cols] from best
/// (operand_tiles.cuh): for mma_16bit with split terms its two bf16 terms, split once where the
/// operand is written (a split_tile), rather than by every unit that reads it; an fp32 tile
/// otherwise.
template <class Op, int R, int Cols>
struct operand_tile_for {
  using type = fp32_tile<R, Cols>;
};
template <class T, int R, int Cols>
struct operand_tile_for<mma_16bit<T, 3>, R, Cols> {
  using type = split_tile<T, R, Cols>;
};
template <class Op, int R, int Cols>
using operand_tile = typename operand_tile_for<Op, R, Cols>::type;

/// The warps of per-warp stage a policy's products need (block_gemm's stage_floats each); one
/// unused row for mma_16bit, so that storage keeps its shape.
template <class Op, int Warps>
inline constexpr int stage_warps = is_mma_16bit<Op> ? 1 : Warps;

/// C = A B as block_gemm (all its arguments; `stage` unused for mma_16bit). `Exact` names the
/// operands that hold values of the policy's 16-bit type exactly (rows as loaded from inputs
/// of that type): mma_16bit with split terms skips their zero lo terms' products, which changes no
/// bit of the result; the WMMA policies ignore it.
/// mma_16bit also takes an operand as a tile of its 16-bit type that holds its values exactly
/// (warp_gemm); the WMMA policies take fp32 tiles only.
template <class Op, class LA, class LB, int M, int N, int Kd, bool lower_a = false,
          exact_operands Exact = exact_operands::none, class EA, class EB, class Epilogue>
__device__ void tile_product(const EA* A, unsigned lda, const EB* B, unsigned ldb, float* stage, Epilogue&& epilogue) {
  if constexpr (is_mma_16bit<Op>) {
    warp_gemm<typename Op::type, Op::terms, LA, LB, M, N, Kd, lower_a, Exact>(A, int(lda), B, int(ldb), epilogue);
  } else {
    static_assert(std::is_same_v<EA, float> && std::is_same_v<EB, float>, "WMMA products of fp32 tiles");
    block_gemm<Op, LA, LB, M, N, Kd, lower_a>(A, lda, B, ldb, stage, epilogue);
  }
}

/// C = A B for products with fewer result tiles than warps and a long Kd: block_gemm_split_k
/// for the WMMA policies (it synchronises inside: every thread calls it), warp_gemm for
/// mma_16bit (a unit per warp over the whole Kd); `Exact` as for tile_product. The caller
/// synchronises before and after.
template <class Op, class LA, class LB, int M, int N, int Kd, exact_operands Exact = exact_operands::none, class EA,
          class EB, class Epilogue>
__device__ void tile_product_split_k(const EA* A, unsigned lda, const EB* B, unsigned ldb, float* stage,
                                     Epilogue&& epilogue) {
  if constexpr (is_mma_16bit<Op>) {
    warp_gemm<typename Op::type, Op::terms, LA, LB, M, N, Kd, false, Exact>(A, int(lda), B, int(ldb), epilogue);
  } else {
    static_assert(std::is_same_v<EA, float> && std::is_same_v<EB, float>, "WMMA products of fp32 tiles");
    block_gemm_split_k<Op, LA, LB, M, N, Kd>(A, lda, B, ldb, stage, epilogue);
  }
}

}  // namespace linattn::cuda::detail
