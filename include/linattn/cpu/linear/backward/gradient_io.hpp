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

}  // namespace linattn::cpu
