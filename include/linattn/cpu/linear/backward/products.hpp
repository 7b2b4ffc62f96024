// SPDX-License-Identifier: MIT
/// \file
/// The one place the backward workers call the shared block product (linalg/row_gemm.hpp):
///
///   C = diag(alpha) op(A) B + beta C,   op(A) = A or A^T (read in place), B row-major
///
/// with row_gemm's causal limits (lower_a: op(A) lower triangular from diagonal d; lower_c:
/// only C(i, j) for j <= i + d is wanted, the rest of each row block is garbage).
#pragma once

#include "../../linalg/row_gemm.hpp"

namespace linattn::cpu {

enum class op { none, transpose };

template <class S, class CB, class AB, class BB>
void product(CB&& C, const AB& a, op oa, const BB& B, const S* alpha = nullptr, S beta = S(0),
             causal mode = causal::none, index_t d = 0) {
  row_gemm<S>(C, oa == op::none ? rows_of(a) : cols_of(a), B, alpha, beta, mode, d);
}

}  // namespace linattn::cpu
