// SPDX-License-Identifier: MIT
/// \file
/// Gradient rows out of the backward workspaces into the caller's views (any strides). dq and
/// dk of a q/k head are shared by its value heads (grouped value heads): the first value head
/// of the group stores its rows, the next ones add theirs, always in the same order, so the
/// sums do not depend on the thread count.
#pragma once

#include <cstdint>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "../../../core/backward.hpp"
#include "../../../core/coefficient_view.hpp"
#include "../../../core/tensor_view.hpp"
#include "../../io/token_io.hpp"

namespace linattn::cpu {

/// dst[0:D] = src[0:D] * factor for float rows, with non-temporal stores where the row is
/// 64-byte aligned (masked ordinary stores for the unaligned head and the tail): gradients are
/// written once and read by the caller later, so fetching their old contents into the cache
/// (what an ordinary store of a cold line does) only costs bandwidth. Returns false when it
/// does not apply (not AVX-512 float); callers then store normally. stream_fence() orders
/// these stores before the call returns.
template <class T, class S>
bool stream_row(T* dst, const S* src, index_t D, S factor) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float> && std::is_same_v<S, float>) {
    index_t i = 0;
    const index_t head = ((64 - (reinterpret_cast<std::uintptr_t>(dst) & 63)) & 63) / 4;
    const __m512 f = _mm512_set1_ps(factor);
    if (head > 0) {
      const index_t h = head < D ? head : D;
      const auto m = static_cast<__mmask16>((1u << h) - 1u);
      _mm512_mask_storeu_ps(dst, m, _mm512_mul_ps(f, _mm512_maskz_loadu_ps(m, src)));
      i = h;
    }
    for (; i + 16 <= D; i += 16) _mm512_stream_ps(dst + i, _mm512_mul_ps(f, _mm512_loadu_ps(src + i)));
    if (i < D) {
      const auto m = static_cast<__mmask16>((1u << (D - i)) - 1u);
      _mm512_mask_storeu_ps(dst + i, m, _mm512_mul_ps(f, _mm512_maskz_loadu_ps(m, src + i)));
    }
    return true;
  }
#endif
  (void)dst, (void)src, (void)D, (void)factor;
  return false;
}

/// dst = src for row-major blocks of the state type, streamed where stream_row applies (the
/// backward's kept intermediates: written once in its first pass, read once in its second).
template <class D, class S>
void stream_block(D&& dst, const S& src) {
  using A = typename S::Scalar;
  for (index_t r = 0; r < src.rows(); ++r)
    if (!stream_row(&dst(r, 0), &src(r, 0), src.cols(), A(1))) dst.row(r) = src.row(r);
}

/// Orders the non-temporal stores of stream_row before what follows.
inline void stream_fence() {
#if defined(__AVX512F__)
  _mm_sfence();
#endif
}

/// out(b, t0 + r, head, :) = factor * src row r (or += when `add`), r in [0, rows). src is a
/// row-major block with contiguous rows.
template <class T, class Src, class A>
void store_gradient_rows(const tensor_view<T, 4>& out, index_t b, index_t t0, index_t head, index_t rows,
                         const Src& src, A factor, bool add) {
  const index_t D = out.extent(3), sd = out.stride(3);
  for (index_t r = 0; r < rows; ++r) {
    T* dst = &out(b, t0 + r, head, 0);
    if (sd == 1 && !add && stream_row(dst, &src(r, 0), D, factor)) continue;
    if (sd == 1 && r + rows_ahead < rows)
      prefetch_bytes(&out(b, t0 + r + rows_ahead, head, 0), D * index_t(sizeof(T)), true);
    if (sd == 1) {  // contiguous rows: vectorised
      Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>> row(dst, D);
      if (add) row = (row.template cast<A>() + factor * src.row(r)).template cast<T>();
      else row = (factor * src.row(r)).template cast<T>();
    } else if (add)
      for (index_t d = 0; d < D; ++d) dst[d * sd] = static_cast<T>(static_cast<A>(dst[d * sd]) + factor * src(r, d));
    else
      for (index_t d = 0; d < D; ++d) dst[d * sd] = static_cast<T>(factor * src(r, d));
  }
}

/// out(b, t0 + r, hv) = src(r) for r in [0, rows), when the view is given.
template <class View, class Src>
void store_token_gradients(const View& out, index_t b, index_t t0, index_t hv, index_t rows, const Src& src) {
  if (!out.given()) return;
  for (index_t r = 0; r < rows; ++r) store_value(out, src(r), b, t0 + r, hv);
}

/// A Householder rule's step gradients of rows [0, rows): beta(input, ||k||^2) gives
/// d input = dbeta d beta / d input (stored into Rule::beta_gradient(gr)) and
/// dk += 2 dbeta (d beta / d ||k||^2) k. dbeta [C] is scaled in place; sq [C] holds ||k||^2.
template <class Rule, class Inputs, class Grads, class DBeta, class Sq, class DK, class Keys>
void store_beta_gradients(const Inputs& in, const Grads& gr, index_t b, index_t t0, index_t hv, index_t rows,
                          DBeta& dbeta, const Sq& sq, DK& dK, const Keys& K) {
  using A = typename DBeta::Scalar;
  for (index_t r = 0; r < rows; ++r) {
    const beta_partials<A> bp = Rule::beta_derivatives(in, b, t0 + r, hv, sq(r));
    if (bp.d_key_sqnorm != A(0)) dK.row(r) += (A(2) * dbeta(r) * bp.d_key_sqnorm) * K.row(r);
    dbeta(r) *= bp.d_input;
  }
  store_token_gradients(Rule::beta_gradient(gr), b, t0, hv, rows, dbeta);
}

}  // namespace linattn::cpu
