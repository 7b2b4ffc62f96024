// SPDX-License-Identifier: MIT
/// \file
/// Small products straight from the chunk workspaces, without packing:
///
///   C[i, :] = alpha_i (A B)[i, :] + beta C[i, :]       A: [m, k] any strides, B: [k, n] rows
///                                                       contiguous, C: [m, n] rows contiguous
///
/// with optional causal limits (the chunk's products are triangular):
///   - `lower_a`: A is lower triangular from diagonal d (A(i, p) = 0 for p > i + d), so row i
///     stops at p = i + d (rounded up to its row block);
///   - `lower_c`: only C(i, j) for j <= i + d is wanted; the rest of each row block's columns
///     (rounded up to 16) are not computed and hold garbage or old values.
///
/// Eigen's GEMM packs both operands into panels on every call; at the chunk's sizes (64 x 128 x
/// 128) the packing was ~15 % of the chunkwise forms' time (perf) and a [K, V] state was packed
/// again for every chunk. Here B's rows are read in place in strips of up to 64 columns
/// (k x 64 floats: 32 KiB at k = 128, L1-resident while every row block of A passes), A's
/// entries are broadcast from wherever they are (so Aᵀ of a row-major matrix costs nothing),
/// and 6 x 64 blocks of C stay in 24 of the 32 AVX-512 registers.
///
/// The AVX-512 path is for float; other types and targets use Eigen (same contract).
#pragma once

#include <algorithm>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "../../core/config.hpp"
#include "eigen_types.hpp"

namespace linattn::cpu {

/// Which entries of a product are needed (see the file comment).
enum class causal { none, lower_a, lower_c };

/// Strided read-only view of a matrix: element (i, p) at data[i * rs + p * cs].
template <class A>
struct strided {
  const A* data;
  index_t rs, cs;
};

/// A row-major Eigen block as a strided view (transposed: rows and columns swapped).
template <class X>
auto rows_of(const X& x) {
  return strided<typename X::Scalar>{x.data(), x.outerStride(), 1};
}
template <class X>
auto cols_of(const X& x) {
  return strided<typename X::Scalar>{x.data(), 1, x.outerStride()};
}

namespace row_gemm_impl {

#if defined(__AVX512F__)
inline constexpr index_t gemm_mr = 6;   // rows of C per register block
inline constexpr index_t gemm_nz = 4;   // 16-float registers per row of a block (64 columns)

/// One MR x (16 NZ) block of C (the last register masked by `last`), over p in [0, k).
template <int MR, int NZ>
inline void gemm_block(float* C, index_t ldc, strided<float> a, const float* B, index_t ldb, index_t k,
                       __mmask16 last, const float* alpha, float beta) {
  // Every loop over r and z is unrolled, so acc stays in registers (GCC otherwise keeps a
  // copy of the array on the stack, one store per FMA).
  __m512 acc[MR][NZ];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) acc[r][z] = _mm512_setzero_ps();
  for (index_t p = 0; p < k; ++p) {
    const float* b = B + p * ldb;
    __m512 bv[NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) bv[z] = z + 1 < NZ ? _mm512_loadu_ps(b + 16 * z) : _mm512_maskz_loadu_ps(last, b + 16 * z);
    const float* ap = a.data + p * a.cs;
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r * a.rs]);
#pragma GCC unroll 4
      for (int z = 0; z < NZ; ++z) acc[r][z] = _mm512_fmadd_ps(av, bv[z], acc[r][z]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const __m512 al = _mm512_set1_ps(alpha ? alpha[r] : 1.0f);
    float* c = C + r * ldc;
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) {
      const __mmask16 m = z + 1 < NZ ? __mmask16(0xFFFF) : last;
      __m512 v = _mm512_mul_ps(al, acc[r][z]);
      if (beta != 0.0f) v = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(m, c + 16 * z), v);
      _mm512_mask_storeu_ps(c + 16 * z, m, v);
    }
  }
}

template <int MR>
inline void gemm_rows(float* C, index_t ldc, strided<float> a, const float* B, index_t ldb, index_t k, index_t nz,
                      __mmask16 last, const float* alpha, float beta) {
  switch (nz) {
    case 1: return gemm_block<MR, 1>(C, ldc, a, B, ldb, k, last, alpha, beta);
    case 2: return gemm_block<MR, 2>(C, ldc, a, B, ldb, k, last, alpha, beta);
    case 3: return gemm_block<MR, 3>(C, ldc, a, B, ldb, k, last, alpha, beta);
    default: return gemm_block<MR, 4>(C, ldc, a, B, ldb, k, last, alpha, beta);
  }
}

inline void gemm_avx512(float* C, index_t ldc, strided<float> a, const float* B, index_t ldb, index_t m, index_t n,
                        index_t k, const float* alpha, float beta, causal mode, index_t d) {
  // Long sums (a whole sequence in the parallel form) in blocks of gemm_kc, so that a strip
  // of B stays in cache: C = alpha A_1 B_1 + beta C, then C += alpha A_j B_j.
  constexpr index_t gemm_kc = 256;
  if (k > gemm_kc) {
    for (index_t p0 = 0; p0 < k; p0 += gemm_kc) {
      const strided<float> ap{a.data + p0 * a.cs, a.rs, a.cs};
      const index_t kb = std::min(gemm_kc, k - p0);
      if (mode == causal::lower_a) {
        // Rows whose causal range ends before p0 take nothing from this block.
        const index_t first = std::clamp<index_t>((p0 - d) / gemm_mr * gemm_mr, 0, m);
        if (p0 == 0) gemm_avx512(C, ldc, ap, B, ldb, m, n, kb, alpha, beta, mode, d);
        else if (first < m)
          gemm_avx512(C + first * ldc, ldc, {ap.data + first * a.rs, a.rs, a.cs}, B + p0 * ldb, ldb, m - first, n, kb,
                      alpha ? alpha + first : nullptr, 1.0f, mode, d + first - p0);
      } else {
        gemm_avx512(C, ldc, ap, B + p0 * ldb, ldb, m, n, kb, alpha, p0 == 0 ? beta : 1.0f, mode, d);
      }
    }
    return;
  }
  constexpr index_t strip = 16 * gemm_nz;
  for (index_t j0 = 0; j0 < n; j0 += strip) {
    for (index_t i0 = 0; i0 < m; i0 += gemm_mr) {
      const index_t mr = std::min(gemm_mr, m - i0);
      index_t cols = std::min(strip, n - j0), kk = k;
      if (mode == causal::lower_c) cols = std::min(cols, i0 + mr + d - j0);  // up to column i + d
      if (mode == causal::lower_a) kk = std::clamp<index_t>(i0 + mr + d, 0, k);
      if (cols <= 0) continue;
      const index_t nz = (cols + 15) / 16, tail = cols - 16 * (nz - 1);
      const auto last = static_cast<__mmask16>((1u << tail) - 1u);
      float* c = C + i0 * ldc + j0;
      const strided<float> ai{a.data + i0 * a.rs, a.rs, a.cs};
      const float* al = alpha ? alpha + i0 : nullptr;
      if (kk == 0) {  // empty sum: C = beta C
        for (index_t r = 0; r < mr; ++r)
          for (index_t j = 0; j < cols; ++j) c[r * ldc + j] = beta != 0.0f ? beta * c[r * ldc + j] : 0.0f;
        continue;
      }
      switch (mr) {
        case 1: gemm_rows<1>(c, ldc, ai, B + j0, ldb, kk, nz, last, al, beta); break;
        case 2: gemm_rows<2>(c, ldc, ai, B + j0, ldb, kk, nz, last, al, beta); break;
        case 3: gemm_rows<3>(c, ldc, ai, B + j0, ldb, kk, nz, last, al, beta); break;
        case 4: gemm_rows<4>(c, ldc, ai, B + j0, ldb, kk, nz, last, al, beta); break;
        case 5: gemm_rows<5>(c, ldc, ai, B + j0, ldb, kk, nz, last, al, beta); break;
        default: gemm_rows<6>(c, ldc, ai, B + j0, ldb, kk, nz, last, al, beta); break;
      }
    }
  }
}
#endif

}  // namespace row_gemm_impl

/// C = diag(alpha) A B + beta C (see the file comment). `alpha`: m row factors or nullptr
/// (all 1); beta = 0 does not read C. C is a row-major block [m, n]; B a row-major block
/// [k, n]; C must not overlap A or B.
template <class A, class CBlock, class BBlock>
void row_gemm(CBlock&& C, strided<A> a, const BBlock& B, const A* alpha = nullptr, A beta = A(0),
              causal mode = causal::none, index_t d = 0) {
  const index_t m = C.rows(), n = C.cols(), k = B.rows();
  if (m == 0 || n == 0) return;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<A, float>) {
    row_gemm_impl::gemm_avx512(C.data(), C.outerStride(), a, B.data(), B.outerStride(), m, n, k, alpha, beta, mode, d);
    return;
  }
#endif
  // Eigen: the full product (causal modes rely on A's zeros / the caller ignoring the rest).
  using stride_t = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;
  const Eigen::Map<const Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, stride_t> Am(
      a.data, m, k, stride_t(a.rs, a.cs));
  (void)mode;
  (void)d;
  if (k == 0) {
    if (beta == A(0)) C.setZero();
    else C *= beta;
  } else if (!alpha && beta == A(0)) {
    C.noalias() = Am * B;
  } else if (!alpha && beta == A(1)) {
    C.noalias() += Am * B;
  } else if (!alpha) {
    C *= beta;
    C.noalias() += Am * B;
  } else if (beta == A(0)) {
    C.noalias() = Am * B;
    C = Eigen::Map<const col_vec<A>>(alpha, m).asDiagonal() * C;  // row scaling in place
  } else {
    for (index_t i = 0; i < m; ++i) {  // row by row: no [m, n] temporary in the chunk loop
      C.row(i) *= beta;
      C.row(i).noalias() += alpha[i] * (Am.row(i) * B);
    }
  }
}

}  // namespace linattn::cpu
