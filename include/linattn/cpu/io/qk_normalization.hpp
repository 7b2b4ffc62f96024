// SPDX-License-Identifier: MIT
/// \file
/// options::normalize_qk on the CPU: q and k divided by sqrt(||x||^2 + qk_norm_epsilon) along
/// their last axis before a form runs (`qk_normalized`: the call's inputs with q and k replaced
/// by normalised copies), and the backward through that division (`chain_qk_normalization`:
/// the gradients of the normalised q and k turned into those of the caller's q and k, in place).
/// Rows are independent and each is computed the same way on any thread, so results do not
/// depend on options::threads.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <type_traits>

#include "../../core/options.hpp"
#include "../../core/problem.hpp"
#include "../../core/tensor_view.hpp"
#include "../element_types.hpp"
#include "../linalg/eigen_types.hpp"
#include "../runtime/scratch_pool.hpp"
#include "../runtime/thread_pool.hpp"

namespace linattn::cpu {

namespace rows {

/// The element offset of the row with leading indices i in a view with these strides.
template <std::size_t R>
index_t offset_of(const std::array<index_t, R>& i, const std::array<index_t, R>& strides) {
  index_t off = 0;
  for (std::size_t d = 0; d + 1 < R; ++d) off += i[d] * strides[d];
  return off;
}

/// f(r, i) for every row r in [0, rows) of a view with these extents (i: its leading indices,
/// row-major), in blocks of rows spread over `threads` threads.
template <std::size_t R, class F>
void for_each(const std::array<index_t, R>& extents, index_t rows, int threads, F&& f) {
  constexpr index_t block = 64;
  const index_t tasks = (rows + block - 1) / block;
  const auto run = [&](index_t task, int) {
    const index_t r0 = task * block, r1 = std::min(rows, r0 + block);
    std::array<index_t, R> i{};
    for (index_t rest = r0, d = R - 1; d-- > 0;) i[d] = rest % extents[d], rest /= extents[d];
    for (index_t r = r0; r < r1; ++r) {
      f(r, i);
      for (std::size_t d = R - 1; d-- > 0;) {  // next row: increment the leading indices
        if (++i[d] < extents[d]) break;
        i[d] = 0;
      }
    }
  };
  if (tasks <= 1) {
    if (tasks == 1) run(0, 0);
    return;
  }
  linattn::detail::parallel_for(tasks, linattn::detail::resolved_threads(threads), run);
}

/// f(row) with the n elements at p, s apart, as an Eigen row map of E: a plain map (vectorised)
/// when they are contiguous, a strided one otherwise.
template <class P, class F>
void with_row(P* p, index_t n, index_t s, F&& f) {
  using E = std::remove_const_t<P>;
  using row_t = std::conditional_t<std::is_const_v<P>, const Eigen::Matrix<E, 1, Eigen::Dynamic>, Eigen::Matrix<E, 1, Eigen::Dynamic>>;
  if (s == 1) f(Eigen::Map<row_t>(p, n));
  else f(Eigen::Map<row_t, 0, Eigen::InnerStride<>>(p, n, Eigen::InnerStride<>(s)));
}

template <class E, int R>
index_t count(const tensor_view<const E, R>& x) {
  return x.extent(R - 1) == 0 ? 0 : x.size() / x.extent(R - 1);
}

}  // namespace rows

/// A contiguous copy of x with every last-axis row divided by sqrt(||row||^2 + eps) (in the
/// state type, rounded once to the element type) into `storage` (x.size() elements); the view
/// points there.
template <class E, int R>
tensor_view<const E, R> normalized_rows(const tensor_view<const E, R>& x, E* storage, int threads) {
  using A = state_t<E>;
  const index_t n = x.extent(R - 1), s = x.stride(R - 1);
  rows::for_each(x.extents(), rows::count(x), threads, [&](index_t r, const auto& i) {
    rows::with_row(x.data() + rows::offset_of(i, x.strides()), n, s, [&](const auto& row) {
      const A inv = A(1) / std::sqrt(row.template cast<A>().squaredNorm() + A(qk_norm_epsilon));
      Eigen::Map<Eigen::Matrix<E, 1, Eigen::Dynamic>>(storage + r * n, n) = (row.template cast<A>() * inv).template cast<E>();
    });
  });
  return tensor_view<const E, R>(storage, x.extents(), contiguous_strides(x.extents()));
}

/// The inputs a form runs on: the caller's, or (options::normalize_qk) a copy whose q and k
/// view normalised copies in buffers leased from the scratch pool. Lives for the duration of
/// the call.
template <class Inputs>
class qk_normalized {
  using E = typename decltype(Inputs::q)::value_type;

 public:
  qk_normalized(const Inputs& in, bool normalize, int threads) : in_(in) {
    if (!normalize) return;
    copy_.emplace(in);
    q_.emplace(static_cast<std::size_t>(in.q.size()));
    k_.emplace(static_cast<std::size_t>(in.k.size()));
    copy_->q = normalized_rows(in.q, q_->data(), threads);
    copy_->k = normalized_rows(in.k, k_->data(), threads);
  }
  qk_normalized(const qk_normalized&) = delete;
  qk_normalized& operator=(const qk_normalized&) = delete;

  const Inputs& inputs() const { return copy_ ? *copy_ : in_; }

 private:
  const Inputs& in_;
  std::optional<Inputs> copy_;
  std::optional<linattn::detail::scratch_lease<E>> q_, k_;
};

/// dx := (dx - x^ (x^ . dx)) / r per last-axis row, r = sqrt(||x||^2 + eps), x^ = x / r: the
/// gradient of the caller's x from that of its normalised copy (in place).
template <class E, int R>
void chain_normalization(const tensor_view<const E, R>& x, const tensor_view<E, R>& dx, int threads) {
  using A = state_t<E>;
  const index_t n = x.extent(R - 1), s = x.stride(R - 1), ds = dx.stride(R - 1);
  rows::for_each(x.extents(), rows::count(x), threads, [&](index_t, const auto& i) {
    rows::with_row(x.data() + rows::offset_of(i, x.strides()), n, s, [&](const auto& row) {
      rows::with_row(dx.data() + rows::offset_of(i, dx.strides()), n, ds, [&](auto grad) {
        const auto xr = row.template cast<A>();
        const auto g = grad.template cast<A>();
        const A r2 = xr.squaredNorm() + A(qk_norm_epsilon);
        const A c = xr.dot(g) / r2;  // x^ (x^ . dx) = x (x . dx) / r^2
        grad = ((g - c * xr) / std::sqrt(r2)).template cast<E>();
      });
    });
  });
}

/// After a backward form ran on the normalised q and k: grads.dq and grads.dk become the
/// gradients of the caller's q and k.
template <class Inputs, class Gradients>
void chain_qk_normalization(const Inputs& in, const Gradients& grads, int threads) {
  chain_normalization(in.q, grads.dq, threads);
  chain_normalization(in.k, grads.dk, threads);
}

}  // namespace linattn::cpu
