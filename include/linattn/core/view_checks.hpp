// SPDX-License-Identifier: MIT
/// \file
/// What validation needs to know about views as memory: the shape as text, the address range
/// a view touches, whether two views overlap, whether a view's elements are distinct, and a
/// walk over every element.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "tensor_view.hpp"

namespace linattn::detail {

template <std::size_t R>
std::string shape_string(const std::array<index_t, R>& e) {
  std::string s = "[";
  for (std::size_t d = 0; d < R; ++d) s += (d ? ", " : "") + std::to_string(e[d]);
  return s + "]";
}

/// Byte addresses [lo, hi) touched by a view; empty (lo == hi) when it has no elements.
using address_range = std::pair<std::uintptr_t, std::uintptr_t>;

inline bool overlaps(const address_range& ra, const address_range& rb) {
  if (ra.first == ra.second || rb.first == rb.second) return false;
  return ra.first < rb.second && rb.first < ra.second;
}

/// The memory one view touches, kept for the overlap checks of validation: up to rank 5,
/// element strides, the element size in bytes.
struct memory_region {
  const char* name = "";
  std::uintptr_t base = 0;
  index_t bytes = 1;  // per element
  int rank = 0;
  std::array<index_t, 5> extent{}, stride{};

  index_t size() const {
    index_t n = 1;
    for (int d = 0; d < rank; ++d) n *= extent[d];
    return n;
  }
  /// Address range [lo, hi) touched; empty when the view has no elements or no data.
  address_range range() const {
    if (size() == 0 || base == 0) return {0, 0};
    index_t lo = 0, hi = 0;
    for (int d = 0; d < rank; ++d) {
      const index_t reach = stride[d] * (extent[d] - 1);
      (reach < 0 ? lo : hi) += reach;
    }
    return {base + static_cast<std::uintptr_t>(lo * bytes), base + static_cast<std::uintptr_t>((hi + 1) * bytes)};
  }
  /// True when no two index tuples address the same element (what outputs need).
  bool distinct() const {
    if (size() == 0) return true;  // e.g. T = 0 with B > 1: contiguous strides contain a 0
    std::array<std::pair<index_t, index_t>, 5> dims{};  // (|stride|, extent)
    int n = 0;
    for (int d = 0; d < rank; ++d)
      if (extent[d] > 1) dims[n++] = {stride[d] < 0 ? -stride[d] : stride[d], extent[d]};
    std::sort(dims.begin(), dims.begin() + n);
    index_t span = 1;  // elements covered by the dims seen so far
    for (int i = 0; i < n; ++i) {
      if (dims[i].first < span) return false;
      span = dims[i].first * (dims[i].second - 1) + span;
    }
    return true;
  }
  /// True when both name exactly the same elements in the same order (an in-place pair).
  bool same_elements(const memory_region& o) const {
    return base == o.base && bytes == o.bytes && rank == o.rank && extent == o.extent && stride == o.stride;
  }
  std::string stride_string() const {
    std::string s = "[";
    for (int d = 0; d < rank; ++d) s += (d ? ", " : "") + std::to_string(stride[d]);
    return s + "]";
  }
};

template <class T, int R>
memory_region region_of(const char* name, const tensor_view<T, R>& v) {
  static_assert(R <= 5, "region_of: views of rank <= 5");
  memory_region m{name, reinterpret_cast<std::uintptr_t>(v.data()), static_cast<index_t>(sizeof(T)), R, {}, {}};
  for (int d = 0; d < R; ++d) m.extent[d] = v.extent(d), m.stride[d] = v.stride(d);
  return m;
}

/// True when the two regions may touch a common byte.
inline bool overlaps(const memory_region& a, const memory_region& b) { return overlaps(a.range(), b.range()); }

/// Calls f(value, index-array) for every element of a view.
template <class T, int R, class F>
void for_each_element(const tensor_view<T, R>& v, F&& f) {
  if (v.size() == 0) return;
  std::array<index_t, R> i{};
  for (;;) {
    index_t off = 0;
    for (int d = 0; d < R; ++d) off += i[d] * v.stride(d);
    f(v.data()[off], i);
    int d = R - 1;
    while (d >= 0 && ++i[d] == v.extent(d)) i[d--] = 0;
    if (d < 0) return;
  }
}

}  // namespace linattn::detail
