// SPDX-License-Identifier: MIT
/// \file
/// Blocked forward substitution with a unit lower-triangular matrix (docs/math.md#solving-for-t).
#pragma once

#include <algorithm>

#include "../../core/config.hpp"

namespace linattn::cpu {

/// X[0:n] <- (I + A)^{-1} X[0:n] for A strictly lower triangular (only A's strictly lower
/// part of the leading n x n block is read). Rows go in blocks of 16: one matrix product
/// subtracts everything the earlier blocks contribute, then rows are substituted one by one
/// inside the block.
template <class MA, class MX>
void unit_lower_solve(const MA& A, MX&& X, index_t n) {
  constexpr index_t bs = 16;
  for (index_t r0 = 0; r0 < n; r0 += bs) {
    const index_t r1 = std::min(r0 + bs, n), m = r1 - r0;
    if (r0 > 0) X.middleRows(r0, m).noalias() -= A.block(r0, 0, m, r0) * X.topRows(r0);
    for (index_t r = r0 + 1; r < r1; ++r)
      X.row(r).noalias() -= A.row(r).segment(r0, r - r0) * X.middleRows(r0, r - r0);
  }
}

}  // namespace linattn::cpu
