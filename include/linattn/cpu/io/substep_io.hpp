// SPDX-License-Identifier: MIT
/// \file
/// Views of a Householder product's tensors as one interleaved sequence of sub-steps
/// (cpu/linear/householder_product.hpp): sub-step s = t n_h + j is step j of token t. The
/// workers load and store rows through the load_rows / store_rows overloads below exactly as
/// through a `[B, T, heads, D]` view, with no copy of the inputs.
#pragma once

#include "../../core/tensor_view.hpp"
#include "token_io.hpp"

namespace linattn::cpu {

/// A per-sub-step input `[B, T, n_h, heads, D]` read as `[B, T n_h, heads, D]`.
template <class T>
struct substep_rows {
  tensor_view<const T, 5> x;  // [B, T, n_h, heads, D]
};

/// A per-token input `[B, T, heads, D]` (the queries) read on the sub-step sequence: row t at
/// the last sub-step of token t, zero at the others (they produce no output).
template <class T>
struct last_substep_rows {
  tensor_view<const T, 4> x;  // [B, T, heads, D]
  index_t steps = 1;          // n_h
};

/// The output `[B, T, HV, V]` written from the sub-step sequence: the last sub-step of token t
/// writes row t, the others nothing.
template <class T>
struct last_substep_output {
  tensor_view<T, 4> x;  // [B, T, HV, V]
  index_t steps = 1;    // n_h
};

/// dst row r = factor * sub-step t0 + r of x.
template <class T, class Dst, class A>
void load_rows(const substep_rows<T>& in, index_t b, index_t t0, index_t head, index_t rows, Dst& dst, A factor) {
  const auto& x = in.x;
  const index_t n = x.extent(2), D = x.extent(4), sd = x.stride(4);
  for (index_t r = 0; r < rows; ++r) {
    const index_t s = t0 + r, ahead = s + rows_ahead;
    if (sd == 1 && r + rows_ahead < rows)  // as load_rows of a [B, T, heads, D] view
      prefetch_bytes(&x(b, ahead / n, ahead % n, head, 0), D * index_t(sizeof(T)), false);
    load_row(&x(b, s / n, s % n, head, 0), D, sd, dst.row(r), factor);
  }
}

/// dst row r = factor * q of sub-step t0 + r (zero off the last sub-step of a token).
template <class T, class Dst, class A>
void load_rows(const last_substep_rows<T>& in, index_t b, index_t t0, index_t head, index_t rows, Dst& dst,
               A factor) {
  const index_t n = in.steps, D = in.x.extent(3), sd = in.x.stride(3);
  for (index_t r = 0; r < rows; ++r) {
    const index_t s = t0 + r, ahead = s + rows_ahead;
    if (sd == 1 && r + rows_ahead < rows && ahead % n == n - 1)
      prefetch_bytes(&in.x(b, ahead / n, head, 0), D * index_t(sizeof(T)), false);
    if (s % n == n - 1) load_row(&in.x(b, s / n, head, 0), D, sd, dst.row(r), factor);
    else dst.row(r).setZero();
  }
}

/// The rows of sub-steps [t0, t0 + rows) that end a token go to that token's output row.
template <class T, class Src>
void store_rows(const last_substep_output<T>& out, index_t b, index_t t0, index_t head, index_t rows, const Src& src) {
  const index_t n = out.steps, D = out.x.extent(3), sd = out.x.stride(3);
  for (index_t r = n - 1 - t0 % n; r < rows; r += n) {
    if (sd == 1 && r + rows_ahead < rows)  // the row of the token rows_ahead / n tokens on
      prefetch_bytes(&out.x(b, (t0 + r) / n + rows_ahead / n, head, 0), D * index_t(sizeof(T)), true);
    store_row(&out.x(b, (t0 + r) / n, head, 0), D, sd, src.row(r));
  }
}

}  // namespace linattn::cpu
