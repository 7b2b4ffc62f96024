// SPDX-License-Identifier: MIT
// tensor_view and the view(...) helpers.
#include "support/catch.hpp"

#include <linattn/linattn.hpp>

#include <array>
#include <vector>

namespace la = linattn;

TEST_CASE("view() over a contiguous buffer is row-major", "[views]") {
  std::vector<float> x(2 * 3 * 4 * 5);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i) + 0.5f;
  const auto v = la::view(x.data(), 2, 3, 4, 5);
  CHECK(v.extents() == std::array<la::index_t, 4>{2, 3, 4, 5});
  CHECK(v.strides() == std::array<la::index_t, 4>{60, 20, 5, 1});
  CHECK(v(1, 2, 3, 4) == x[1 * 60 + 2 * 20 + 3 * 5 + 4]);
  CHECK(v.size() == 120);
  CHECK(v.given());
  la::tensor_view<const float, 4> c = v;  // mutable converts to const
  CHECK(c(0, 1, 2, 3) == x[20 + 10 + 3]);
}

TEST_CASE("strided view() reads a head-first buffer and broadcasts with stride 0", "[views]") {
  std::vector<double> x(2 * 4 * 3);  // physical [B=2, H=4, T=3]
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = double(i) * 1.25 + 1;
  const auto v = la::view(x.data(), {2, 3, 4}, {12, 1, 3});  // logical [B, T, H]
  CHECK(v(1, 2, 3) == x[12 + 3 * 3 + 2]);
  const std::vector<double> per_head{-0.5, -0.25, -0.125};
  const auto g = la::view(per_head.data(), {5, 7, 3}, {0, 0, 1});
  CHECK(g(4, 6, 2) == -0.125);
  CHECK(g(0, 3, 1) == -0.25);
}

TEST_CASE("a default view is 'not given'", "[views]") {
  la::tensor_view<const float, 4> none;
  CHECK_FALSE(none.given());
  la::options opt;  // deduces options<float>
  CHECK_FALSE(opt.initial_state.given());
  CHECK_FALSE(opt.cu_seqlens.given());
  CHECK(opt.chunk_size == 64);
  static_assert(std::is_same_v<decltype(opt), la::options<float>>);
}
