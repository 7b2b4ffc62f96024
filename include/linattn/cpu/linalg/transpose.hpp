// SPDX-License-Identifier: MIT
/// \file
/// dst = srcᵀ for row-major blocks, in 8 x 8 register tiles for float (AVX): the chunk keys
/// transposed once per chunk, so that the score and Gram products (Q Kᵀ, K Kᵀ) read Kᵀ's rows
/// in place (gemm.hpp). Eigen's `dst = src.transpose()` moves one element at a time and
/// took as long as the product it feeds.
#pragma once

#if defined(__AVX__)
#include "eigen_types.hpp"  // <immintrin.h>, read once with GCC 12's intrinsics warnings off
#endif

#include <type_traits>

#include "../../core/config.hpp"

namespace linattn::cpu {

namespace transpose_impl {

#if defined(__AVX__)
/// The 8 x 8 float tile at s (row stride ss) transposed into d (row stride ds).
inline void tile8(float* d, index_t ds, const float* s, index_t ss) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + i * ss);
  // Pairs of rows interleaved, then pairs of pairs, then the 128-bit halves exchanged.
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(d + i * ds, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(d + (i + 4) * ds, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}
#endif

}  // namespace transpose_impl

/// dst[0:c, 0:r] = src[0:r, 0:c]ᵀ (row-major blocks with unit inner stride).
template <class D, class S>
void transpose_into(D&& dst, const S& src) {
  using A = typename S::Scalar;
  const index_t r = src.rows(), c = src.cols(), ss = src.outerStride(), ds = dst.outerStride();
  const A* s = src.data();
  A* d = dst.data();
  index_t i0 = 0;
#if defined(__AVX__)
  if constexpr (std::is_same_v<A, float>) {
    for (; i0 + 8 <= r; i0 += 8) {
      index_t j0 = 0;
      for (; j0 + 8 <= c; j0 += 8) transpose_impl::tile8(d + j0 * ds + i0, ds, s + i0 * ss + j0, ss);
      for (index_t i = i0; i < i0 + 8; ++i)
        for (index_t j = j0; j < c; ++j) d[j * ds + i] = s[i * ss + j];
    }
  }
#endif
  for (index_t i = i0; i < r; ++i)
    for (index_t j = 0; j < c; ++j) d[j * ds + i] = s[i * ss + j];
}

}  // namespace linattn::cpu
