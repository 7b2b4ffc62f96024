// SPDX-License-Identifier: MIT
/// \file
/// Gradient rows out of the backward workspaces into the caller's views (any strides). dq and
/// dk of a q/k head are shared by its value heads (grouped value heads): the first value head
/// of the group stores its rows, the next ones add theirs, always in the same order, so the
/// sums do not depend on the thread count.
#pragma once

#include "../../../core/tensor_view.hpp"
#include "../../io/token_io.hpp"

namespace linattn::cpu {

/// out(b, t0 + r, head, :) = factor * src row r (or += when `add`), r in [0, rows).
template <class T, class Src, class A>
void store_gradient_rows(const tensor_view<T, 4>& out, index_t b, index_t t0, index_t head, index_t rows,
                         const Src& src, A factor, bool add) {
  const index_t D = out.extent(3), sd = out.stride(3);
  for (index_t r = 0; r < rows; ++r) {
    T* dst = &out(b, t0 + r, head, 0);
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
template <class T, class Src>
void store_token_gradients(const tensor_view<T, 3>& out, index_t b, index_t t0, index_t hv, index_t rows,
                           const Src& src) {
  if (!out.given()) return;
  for (index_t r = 0; r < rows; ++r) out(b, t0 + r, hv) = static_cast<T>(src(r));
}

/// Hints the cache to bring `bytes` bytes at p into L2 (not L1: the backward issues these a
/// whole chunk ahead, hundreds of KiB, which L1 would evict before use and which would evict
/// the current chunk's workspaces).
inline void prefetch_l2(const void* p, index_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (index_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 0, 2);
}

/// Rows [t0, t0 + rows) of one head of x into L2: the next chunk's rows arrive while the
/// current chunk computes.
template <class T>
void prefetch_rows(const tensor_view<T, 4>& x, index_t b, index_t t0, index_t head, index_t rows) {
  if (!x.given() || x.stride(3) != 1) return;
  const index_t bytes = x.extent(3) * index_t(sizeof(T));
  for (index_t r = 0; r < rows; ++r) prefetch_l2(&x(b, t0 + r, head, 0), bytes);
}

/// The same for a row-major matrix block.
template <class X>
void prefetch_block(const X& x) {
  const index_t bytes = x.cols() * index_t(sizeof(typename X::Scalar));
  for (index_t r = 0; r < x.rows(); ++r) prefetch_l2(&x(r, 0), bytes);
}

}  // namespace linattn::cpu
