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
#include <vector>

#include "../../core/options.hpp"
#include "../../core/problem.hpp"
#include "../../core/tensor_view.hpp"
#include "../element_types.hpp"
#include "../linalg/eigen_types.hpp"
#include "../runtime/thread_pool.hpp"

namespace linattn::cpu {

namespace rows {

/// The element offset of row r (row-major over the leading axes) of a view.
template <std::size_t R>
index_t offset_of(index_t r, const std::array<index_t, R>& extents, const std::array<index_t, R>& strides) {
  index_t off = 0;
  for (std::size_t d = R - 1; d-- > 0;) {
    off += (r % extents[d]) * strides[d];
    r /= extents[d];
  }
  return off;
}

/// f(r) for every row r in [0, rows), in blocks of rows spread over `threads` threads.
template <class F>
void for_each(index_t rows, int threads, F&& f) {
  constexpr index_t block = 64;
  const index_t tasks = (rows + block - 1) / block;
  const auto run = [&](index_t task, int) {
    for (index_t r = task * block; r < std::min(rows, (task + 1) * block); ++r) f(r);
  };
  if (tasks <= 1) {
    if (tasks == 1) run(0, 0);
    return;
  }
  linattn::detail::parallel_for(tasks, linattn::detail::resolved_threads(threads), run);
}

/// The n elements at p, s apart, as a row of the state type.
template <class E>
auto load(const E* p, index_t n, index_t s) {
  using A = state_t<E>;
  return Eigen::Map<const Eigen::Matrix<E, 1, Eigen::Dynamic>, 0, Eigen::InnerStride<>>(p, n, Eigen::InnerStride<>(s))
      .template cast<A>();
}

/// The n elements at p, s apart, as a writable map.
template <class E>
auto map(E* p, index_t n, index_t s) {
  return Eigen::Map<Eigen::Matrix<E, 1, Eigen::Dynamic>, 0, Eigen::InnerStride<>>(p, n, Eigen::InnerStride<>(s));
}

template <class E, int R>
index_t count(const tensor_view<const E, R>& x) {
  return x.extent(R - 1) == 0 ? 0 : x.size() / x.extent(R - 1);
}

}  // namespace rows

/// A contiguous copy of x with every last-axis row divided by sqrt(||row||^2 + eps) (in the
/// state type, rounded once to the element type). `storage` receives the elements; the view
/// points into it.
template <class E, int R>
tensor_view<const E, R> normalized_rows(const tensor_view<const E, R>& x, std::vector<E>& storage, int threads) {
  using A = state_t<E>;
  storage.resize(static_cast<std::size_t>(x.size()));
  const index_t n = x.extent(R - 1), s = x.stride(R - 1);
  rows::for_each(rows::count(x), threads, [&](index_t r) {
    const auto row = rows::load(x.data() + rows::offset_of(r, x.extents(), x.strides()), n, s);
    const A inv = A(1) / std::sqrt(row.squaredNorm() + A(qk_norm_epsilon));
    rows::map(storage.data() + r * n, n, 1) = (row * inv).template cast<E>();
  });
  return tensor_view<const E, R>(storage.data(), x.extents(), contiguous_strides(x.extents()));
}

/// The inputs a form runs on: the caller's, or (options::normalize_qk) a copy whose q and k
/// view normalised copies held here. Lives for the duration of the call.
template <class Inputs>
class qk_normalized {
  using E = typename decltype(Inputs::q)::value_type;

 public:
  qk_normalized(const Inputs& in, bool normalize, int threads) : in_(in) {
    if (!normalize) return;
    copy_.emplace(in);
    copy_->q = normalized_rows(in.q, q_, threads);
    copy_->k = normalized_rows(in.k, k_, threads);
  }
  qk_normalized(const qk_normalized&) = delete;
  qk_normalized& operator=(const qk_normalized&) = delete;

  const Inputs& inputs() const { return copy_ ? *copy_ : in_; }

 private:
  const Inputs& in_;
  std::optional<Inputs> copy_;
  std::vector<E> q_, k_;
};

/// dx := (dx - x^ (x^ . dx)) / r per last-axis row, r = sqrt(||x||^2 + eps), x^ = x / r: the
/// gradient of the caller's x from that of its normalised copy (in place).
template <class E, int R>
void chain_normalization(const tensor_view<const E, R>& x, const tensor_view<E, R>& dx, int threads) {
  using A = state_t<E>;
  const index_t n = x.extent(R - 1), s = x.stride(R - 1), ds = dx.stride(R - 1);
  rows::for_each(rows::count(x), threads, [&](index_t r) {
    const auto row = rows::load(x.data() + rows::offset_of(r, x.extents(), x.strides()), n, s);
    auto grad = rows::map(dx.data() + rows::offset_of(r, dx.extents(), dx.strides()), n, ds);
    const auto g = grad.template cast<A>();
    const A r2 = row.squaredNorm() + A(qk_norm_epsilon);
    const A c = row.dot(g) / r2;  // x^ (x^ . dx) = x (x . dx) / r^2
    grad = ((g - c * row) / std::sqrt(r2)).template cast<E>();
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
