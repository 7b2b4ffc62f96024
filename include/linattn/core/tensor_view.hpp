// SPDX-License-Identifier: MIT
/// \file
/// Non-owning strided views over caller memory, and `view(...)` helpers to make them.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include "config.hpp"

namespace linattn {

namespace detail {

/// The shape half of a view: extents and element strides, the element count and the offset of
/// an index tuple (shared by tensor_view and either_view).
template <int Rank>
class view_layout {
  static_assert(Rank >= 1, "a view needs Rank >= 1");

 public:
  using extents_type = std::array<index_t, Rank>;
  static constexpr int rank = Rank;

  constexpr view_layout() = default;
  constexpr view_layout(const extents_type& extents, const extents_type& strides)
      : extents_(extents), strides_(strides) {}

  constexpr const extents_type& extents() const { return extents_; }
  constexpr const extents_type& strides() const { return strides_; }
  LINATTN_HOST_DEVICE constexpr index_t extent(int d) const { return extents_[d]; }
  LINATTN_HOST_DEVICE constexpr index_t stride(int d) const { return strides_[d]; }

  /// Number of elements (product of extents).
  constexpr index_t size() const {
    index_t n = 1;
    for (index_t e : extents_) n *= e;
    return n;
  }

 protected:
  /// True when some extent is non-zero (a view with no data but a shape counts as given).
  constexpr bool has_shape() const {
    for (index_t e : extents_)
      if (e != 0) return true;
    return false;
  }
  /// Element offset of an index tuple; no bounds checks (validation happens once per call).
  template <class... I>
  LINATTN_HOST_DEVICE constexpr index_t offset(I... idx) const {
    const index_t i[] = {static_cast<index_t>(idx)...};
    index_t off = 0;
    for (int d = 0; d < Rank; ++d) off += i[d] * strides_[d];
    return off;
  }

 private:
  extents_type extents_{};
  extents_type strides_{};
};

}  // namespace detail

/// A non-owning view of a `Rank`-dimensional array. Strides count elements (not bytes), may be
/// zero (broadcast) or negative. A default-constructed view is "not given" (used for optional
/// arguments such as `options::initial_state`).
template <class T, int Rank>
class tensor_view : public detail::view_layout<Rank> {
  using layout = detail::view_layout<Rank>;

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using typename layout::extents_type;

  constexpr tensor_view() = default;

  /// View of `data` with the given extents and element strides.
  constexpr tensor_view(T* data, const extents_type& extents, const extents_type& strides)
      : layout(extents, strides), data_(data) {}

  /// A view of mutable elements converts to a view of const elements.
  template <class U>
    requires(std::is_same_v<const U, T> && !std::is_const_v<U>)
  constexpr tensor_view(const tensor_view<U, Rank>& other)  // NOLINT(google-explicit-constructor)
      : layout(other.extents(), other.strides()), data_(other.data()) {}

  LINATTN_HOST_DEVICE constexpr T* data() const { return data_; }

  /// True when the caller supplied this view (non-null data or a non-zero extent).
  constexpr bool given() const { return data_ != nullptr || this->has_shape(); }

  /// Element access; no bounds checks (validation happens once per call).
  template <class... I>
    requires(sizeof...(I) == Rank)
  LINATTN_HOST_DEVICE constexpr T& operator()(I... idx) const {
    return data_[this->offset(idx...)];
  }

 private:
  T* data_ = nullptr;
};

/// Row-major (C-order) strides for the given extents.
template <std::size_t Rank>
constexpr std::array<index_t, Rank> contiguous_strides(const std::array<index_t, Rank>& extents) {
  std::array<index_t, Rank> s{};
  index_t acc = 1;
  for (std::size_t d = Rank; d-- > 0;) {
    s[d] = acc;
    acc *= extents[d];
  }
  return s;
}

/// Contiguous row-major view: `view(ptr, B, T, H, K)` is a `tensor_view<T, 4>`.
template <class T, class... I>
  requires(sizeof...(I) >= 1 && (std::is_integral_v<I> && ...))
constexpr tensor_view<T, static_cast<int>(sizeof...(I))> view(T* data, I... extents) {
  constexpr int R = static_cast<int>(sizeof...(I));
  const std::array<index_t, R> e{static_cast<index_t>(extents)...};
  return tensor_view<T, R>(data, e, contiguous_strides(e));
}

/// Strided view: `view(ptr, {B, T, H}, {0, 0, 1})` broadcasts a per-head constant over B and T.
template <class T, std::size_t R>
constexpr tensor_view<T, static_cast<int>(R)> view(T* data, const index_t (&extents)[R],
                                                   const index_t (&strides)[R]) {
  std::array<index_t, R> e{}, s{};
  for (std::size_t d = 0; d < R; ++d) {
    e[d] = extents[d];
    s[d] = strides[d];
  }
  return tensor_view<T, static_cast<int>(R)>(data, e, s);
}

}  // namespace linattn
