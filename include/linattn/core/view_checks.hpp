// SPDX-License-Identifier: MIT
/// \file
/// What validation needs to know about views as memory: the shape as text, the address range
/// a view touches, whether two views overlap, whether a view's elements are distinct, and a
/// walk over every element.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "coefficient_view.hpp"
#include "options.hpp"
#include "tensor_view.hpp"

namespace linattn::detail {

template <std::size_t R>
std::string shape_string(const std::array<index_t, R>& e) {
  std::string s = "[";
  for (std::size_t d = 0; d < R; ++d) s += (d ? ", " : "") + std::to_string(e[d]);
  return s + "]";
}

/// True when the view's element count and its address reach in bytes (sum of |stride| x
/// (extent - 1), times the element size) fit the index type, so no index arithmetic on it can
/// wrap around.
template <class V>
bool fits_index(const V& v, index_t element_bytes) {
  constexpr int R = V::rank;
  index_t count = 1, reach = 0;
  for (int d = 0; d < R; ++d) {
    const index_t e = v.extent(d), st = v.stride(d) < 0 ? -v.stride(d) : v.stride(d);
    index_t term = 0;
    if (e < 0 || v.stride(d) == std::numeric_limits<index_t>::min()) return false;
    if (__builtin_mul_overflow(count, e, &count)) return false;
    if (e > 0 && (__builtin_mul_overflow(st, e - 1, &term) || __builtin_add_overflow(reach, term, &reach))) return false;
  }
  index_t bytes = 0;
  return !__builtin_mul_overflow(reach + 1, element_bytes, &bytes);
}

/// Bytes per element of a view (an either_view: of the element type it was made from).
template <class T, int R>
constexpr index_t element_bytes_of(const tensor_view<T, R>&) {
  return static_cast<index_t>(sizeof(T));
}
template <class N, class W, int R>
index_t element_bytes_of(const either_view<N, W, R>& v) {
  return v.element_bytes();
}

/// A tensor_view or an either_view.
template <class V>
concept strided_view = requires(const V& v) {
  element_bytes_of(v);
  v.data();
};

template <strided_view V>
bool fits_index(const V& v) {
  return fits_index(v, element_bytes_of(v));
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
  bool distinct() const;
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

template <strided_view V>
memory_region region_of(const char* name, const V& v) {
  constexpr int R = V::rank;
  static_assert(R <= 5, "region_of: views of rank <= 5");
  memory_region m{name, reinterpret_cast<std::uintptr_t>(v.data()), element_bytes_of(v), R, {}, {}};
  for (int d = 0; d < R; ++d) m.extent[d] = v.extent(d), m.stride[d] = v.stride(d);
  return m;
}

/// Element offsets as a lattice: sum_d k_d s_d with k_d in [lo_d, hi_d] and s_d > 0. Whether
/// it reaches a target offset is decided by a depth-first search from the largest stride down,
/// pruned by the range the smaller strides can still cover; a search that would take more
/// than `budget` steps gives up (the callers then answer conservatively).
class offset_lattice {
 public:
  void add(index_t stride, index_t lo, index_t hi) {
    if (lo == hi && lo == 0) return;
    if (stride < 0) stride = -stride, std::swap(lo, hi), lo = -lo, hi = -hi;
    if (stride == 0) return;  // adds nothing to the offset
    for (int i = 0; i < n_; ++i)
      if (dims_[i].stride == stride) {  // equal strides: the index ranges add
        dims_[i].lo += lo, dims_[i].hi += hi;
        return;
      }
    dims_[n_++] = {stride, lo, hi};
  }
  /// 1: some k reaches `target`; 0: none does; -1: gave up.
  int reaches(index_t target, long budget = 100000) {
    std::sort(dims_.begin(), dims_.begin() + n_, [](const dim& a, const dim& b) { return a.stride > b.stride; });
    for (int i = n_ - 1; i >= 0; --i) {  // [min, max] of the sum over dims i..n-1
      min_[i] = dims_[i].stride * dims_[i].lo + (i + 1 < n_ ? min_[i + 1] : 0);
      max_[i] = dims_[i].stride * dims_[i].hi + (i + 1 < n_ ? max_[i + 1] : 0);
    }
    budget_ = budget;
    const bool found = search(0, target);
    return budget_ < 0 ? -1 : found;
  }
  int size() const { return n_; }

 private:
  struct dim {
    index_t stride, lo, hi;
  };
  static index_t floor_div(index_t a, index_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
  static index_t ceil_div(index_t a, index_t b) { return -floor_div(-a, b); }
  bool search(int i, index_t target) {
    if (--budget_ < 0) return false;
    if (i == n_) return target == 0;
    if (target < min_[i] || target > max_[i]) return false;
    const dim& d = dims_[i];
    const index_t rest_min = i + 1 < n_ ? min_[i + 1] : 0, rest_max = i + 1 < n_ ? max_[i + 1] : 0;
    const index_t k0 = std::max(d.lo, ceil_div(target - rest_max, d.stride));
    const index_t k1 = std::min(d.hi, floor_div(target - rest_min, d.stride));
    for (index_t k = k0; k <= k1 && budget_ >= 0; ++k)
      if (search(i + 1, target - k * d.stride)) return true;
    return false;
  }
  std::array<dim, 10> dims_{};
  std::array<index_t, 10> min_{}, max_{};
  int n_ = 0;
  long budget_ = 0;
};

inline bool memory_region::distinct() const {
  if (size() == 0) return true;  // e.g. T = 0 with B > 1: contiguous strides contain a 0
  for (int d = 0; d < rank; ++d)
    if (extent[d] > 1 && stride[d] == 0) return false;
  // Two index tuples meet iff sum_d k_d s_d = 0 for some k != 0, |k_d| < extent_d; by symmetry
  // the first nonzero k_d (in dimension order) is positive.
  for (int first = 0; first < rank; ++first) {
    if (extent[first] < 2) continue;
    offset_lattice l;
    l.add(stride[first], 1, extent[first] - 1);
    for (int d = first + 1; d < rank; ++d) l.add(stride[d], -(extent[d] - 1), extent[d] - 1);
    if (l.reaches(0) != 0) return false;  // found, or too costly to rule out
  }
  return true;
}

/// True when the two regions touch a common byte: exact for views of one element size whose
/// addresses lie on one grid of that size (an `out` interleaved with `v` in one buffer does not
/// overlap it); otherwise, or when the exact test would be costly, whether their address
/// ranges intersect.
inline bool overlaps(const memory_region& a, const memory_region& b) {
  if (!overlaps(a.range(), b.range())) return false;
  const auto delta = static_cast<std::intptr_t>(b.base - a.base);
  if (a.bytes != b.bytes || delta % a.bytes != 0) return true;
  offset_lattice l;  // a's offsets minus b's offsets, in elements
  for (int d = 0; d < a.rank; ++d) l.add(a.stride[d], 0, a.extent[d] - 1);
  for (int d = 0; d < b.rank; ++d) l.add(b.stride[d], -(b.extent[d] - 1), 0);
  return l.reaches(static_cast<index_t>(delta / a.bytes)) != 0;
}

/// The offsets of a packed batch as a region (32- or 64-bit entries).
inline memory_region region_of(const char* name, const seqlens_view& cu) {
  memory_region m{name, reinterpret_cast<std::uintptr_t>(cu.data()), cu.wide() ? 8 : 4, 1, {}, {}};
  m.extent[0] = cu.size(), m.stride[0] = cu.stride();
  return m;
}

/// Calls f(value, index-array) for every element of a view (a tensor_view, or an either_view:
/// the value as the wide type).
template <strided_view V, class F>
void for_each_element(const V& v, F&& f) {
  constexpr int R = V::rank;
  if (v.size() == 0) return;
  std::array<index_t, R> i{};
  for (;;) {
    f(std::apply([&](auto... x) { return v(x...); }, i), i);
    int d = R - 1;
    while (d >= 0 && ++i[d] == v.extent(d)) i[d--] = 0;
    if (d < 0) return;
  }
}

}  // namespace linattn::detail
