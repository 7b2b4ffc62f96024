// SPDX-License-Identifier: MIT
/// \file
/// The one place the backward workers call the shared block product (linalg/gemm.hpp):
///
///   C = diag(alpha) op(A) B + beta C,   op(A) = A or A^T (read in place), B row-major
///
/// with gemm's triangle limits (lower_a: op(A) lower triangular from diagonal d; lower_c:
/// only C(i, j) for j <= i + d is wanted, the rest of each row block is garbage).
#pragma once

#include "../../linalg/gemm.hpp"

namespace linattn::cpu {

enum class op { none, transpose };

template <class S, class CB, class AB, class BB>
void product(CB&& C, const AB& a, op oa, const BB& B, const S* alpha = nullptr, S beta = S(0),
             triangle mode = triangle::none, index_t d = 0) {
  const strided<S> as = oa == op::none ? rows_of(a) : cols_of(a);
  const gemm_params<S> x{.row_alpha = alpha, .beta = beta, .diag = d};
  switch (mode) {
    case triangle::none: return gemm(C, as, B, x);
    case triangle::lower_a: return gemm<triangle::lower_a>(C, as, B, x);
    case triangle::lower_c: return gemm<triangle::lower_c>(C, as, B, x);
  }
}

/// C = L^T B + beta C for L lower triangular ([n, n]; B, C [n, m]). L^T is upper triangular,
/// which gemm's triangles cannot skip; with the rows of B and C taken in reverse order (J the
/// reversal: negative row strides) the operand J L^T J is lower triangular and half the work
/// goes: (J L^T J)(i, p) = L(n-1-p, n-1-i).
template <class S, class CB, class LB, class BB>
void product_lower_transposed(CB&& C, const LB& L, const BB& B, S beta = S(0)) {
  const index_t n = L.rows();
  if (n == 0) return;
  const strided<S> reversed{&L(n - 1, n - 1), -1, -index_t(L.outerStride())};
  gemm<triangle::lower_a>(n, index_t(C.cols()), n, reversed, &B(n - 1, 0), -index_t(B.outerStride()), &C(n - 1, 0),
                          -index_t(C.outerStride()), gemm_params<S>{.beta = beta});
}

}  // namespace linattn::cpu
