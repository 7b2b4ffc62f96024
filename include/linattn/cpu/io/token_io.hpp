// SPDX-License-Identifier: MIT
/// \file
/// Moves data between caller views (any strides) and the CPU workspaces: token rows of one
/// head in, output rows out, and the per-head state.
#pragma once

#include <cmath>
#include <type_traits>

#include "../../core/coefficient_view.hpp"
#include "../../core/tensor_view.hpp"
#include "../linalg/eigen_types.hpp"

namespace linattn::cpu {

/// Rows of one head lie H * D elements apart (4 KiB at H = 8, D = 128: a new page per row),
/// out of reach of the hardware prefetcher, which stays inside a page. The row copies below
/// prefetch the row this many rows ahead, so the misses of several rows overlap, and past the
/// rows they copy up to the tensor's last token: the first rows of the next chunk are then in
/// cache when its copy starts (the profile: bench/README.md).
inline constexpr index_t rows_ahead = 8;

/// Hints the cache to fetch the `bytes` bytes at p (for writing when `write`).
inline void prefetch_bytes(const void* p, index_t bytes, bool write) {
  const char* c = static_cast<const char*>(p);
  for (index_t o = 0; o < bytes; o += 64) {
    if (write) __builtin_prefetch(c + o, 1, 3);
    else __builtin_prefetch(c + o, 0, 3);
  }
}

/// Prefetches row x(b, t, head, :) of a [B, T, heads, D] view when its rows are contiguous and
/// t is inside the tensor (for writing when `write`).
template <class X>
void prefetch_row(const X& x, index_t b, index_t t, index_t head, bool write) {
  if (x.stride(3) == 1 && t < x.extent(1))
    prefetch_bytes(&x(b, t, head, 0), x.extent(3) * index_t(sizeof(x(b, t, head, 0))), write);
}

/// dst = factor * the D elements at src, sd apart (one token row of one head).
template <class T, class Row, class A>
void load_row(const T* src, index_t D, index_t sd, Row&& dst, A factor) {
  if (sd == 1)  // contiguous rows: a vectorised convert-and-scale
    dst = Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(src, D).template cast<A>() * factor;
  else
    for (index_t d = 0; d < D; ++d) dst(d) = factor * static_cast<A>(src[d * sd]);
}

/// The D elements at dst, sd apart = src (one output row of one head).
template <class T, class Row>
void store_row(T* dst, index_t D, index_t sd, const Row& src) {
  if (sd == 1)
    Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(dst, D) = src.template cast<T>();
  else
    for (index_t d = 0; d < D; ++d) dst[d * sd] = static_cast<T>(src(d));
}

/// dst row r = factor * x(b, t0 + r, head, :) for r in [0, rows).   x: [B, T, heads, D]
template <class T, class Dst, class A>
void load_rows(const tensor_view<const T, 4>& x, index_t b, index_t t0, index_t head, index_t rows,
               Dst& dst, A factor) {
  const index_t D = x.extent(3), sd = x.stride(3);
  for (index_t r = 0; r < rows; ++r) {
    prefetch_row(x, b, t0 + r + rows_ahead, head, false);
    load_row(&x(b, t0 + r, head, 0), D, sd, dst.row(r), factor);
  }
}

/// out(b, t0 + r, head, :) = src row r for r in [0, rows).   out: [B, T, HV, V]
template <class T, class Src>
void store_rows(const tensor_view<T, 4>& out, index_t b, index_t t0, index_t head, index_t rows,
                const Src& src) {
  const index_t D = out.extent(3), sd = out.stride(3);
  for (index_t r = 0; r < rows; ++r) {
    prefetch_row(out, b, t0 + r + rows_ahead, head, true);
    store_row(&out(b, t0 + r, head, 0), D, sd, src.row(r));
  }
}

/// The rows of q (times `scale`), k and v of tokens [t0, t0 + rows) from a call's inputs (any
/// struct with views q, k, v): q and k of q/k head hq into Q and K, v of value head hv into V.
template <class In, class Q, class K, class V, class A>
void load_qkv_rows(const In& in, index_t b, index_t t0, index_t rows, index_t hq, index_t hv, A scale, Q&& q, K&& k,
                   V&& v) {
  load_rows(in.q, b, t0, hq, rows, q, scale);
  load_rows(in.k, b, t0, hq, rows, k, A(1));
  load_rows(in.v, b, t0, hv, rows, v, A(1));
}

/// The same into a coefficient gradient `[B, T, HV, K]` held in either element type (a vector
/// gate's dg, float under 16-bit inputs when the caller asks for it).
template <class N, class W, class Src>
void store_rows(const either_view<N, W, 4>& out, index_t b, index_t t0, index_t head, index_t rows, const Src& src) {
  using X = typename either_view<N, W, 4>::value_type;
  for (index_t r = 0; r < rows; ++r)
    for (index_t d = 0; d < out.extent(3); ++d) out.store(static_cast<X>(src(r, d)), b, t0 + r, head, d);
}

/// True when every entry of x is finite: 0 * x sums to NaN exactly when an entry is inf or
/// NaN (a vectorised reduction, unlike a loop of std::isfinite).
template <class X>
bool all_finite(const Eigen::MatrixBase<X>& x) {
  using A = typename X::Scalar;
  return !std::isnan((x.array() * A(0)).sum());
}

/// H = state(n, hv, :, c0 : c0 + H.cols()) ([K, V] from column 0 for a plain state; a state
/// with extra columns takes its parts by their first column c0), or zero when the state view is
/// not given or n < 0 (a sequence without a pool slot: problem::slot).
template <class S, class A>
void load_state(const tensor_view<S, 4>& state, index_t n, index_t hv, mat<A>& H, index_t c0 = 0) {
  if (!state.given() || n < 0) {
    H.setZero();
    return;
  }
  for (index_t i = 0; i < H.rows(); ++i) {
    if (state.stride(3) == 1)
      H.row(i) = Eigen::Map<const Eigen::Matrix<std::remove_const_t<S>, 1, Eigen::Dynamic>>(&state(n, hv, i, c0), H.cols())
                     .template cast<A>();
    else
      for (index_t j = 0; j < H.cols(); ++j) H(i, j) = static_cast<A>(state(n, hv, i, c0 + j));
  }
}

/// state(n, hv, :, c0 : c0 + H.cols()) = H (any row-major Eigen matrix or map), when the state
/// view is given and n >= 0.
template <class S, class Hm>
void store_state(const tensor_view<S, 4>& state, index_t n, index_t hv, const Hm& H, index_t c0 = 0) {
  if (!state.given() || n < 0) return;
  for (index_t i = 0; i < H.rows(); ++i) {
    if (state.stride(3) == 1)
      Eigen::Map<Eigen::Matrix<S, 1, Eigen::Dynamic>>(&state(n, hv, i, c0), H.cols()) = H.row(i).template cast<S>();
    else
      for (index_t j = 0; j < H.cols(); ++j) state(n, hv, i, c0 + j) = static_cast<S>(H(i, j));
  }
}

}  // namespace linattn::cpu
