// SPDX-License-Identifier: MIT
/// \file
/// Views of a rule's coefficients (log gates, write strengths, step sizes, per-head parameters)
/// and of their gradients. With float or double inputs they are plain `tensor_view`s of the
/// input type. With 16-bit inputs (bfloat16, half) a coefficient may be held either in the
/// input type or in float, fla's mixed precision (bf16 q, k, v with fp32 g and beta): the
/// view records which when it is made and converts each element as it is read or written, so
/// no conversion pass runs over the caller's tensors.
#pragma once

#include <cstdint>
#include <type_traits>

#include "config.hpp"
#include "family.hpp"
#include "tensor_view.hpp"

namespace linattn {

/// An element of an either_view as loaded and not yet converted: the bits it is stored in and
/// whether they are the wide type's. A kernel that loads a coefficient well before it uses it
/// keeps this, so that the load overlaps the work between; `value()` converts where the value
/// is needed. (either_view's read converts at once, so its caller waits for the load there.)
template <class Narrow, class Wide>
struct stored_element {
  static_assert(sizeof(Narrow) == 2 && sizeof(Wide) == 4, "stored_element: a 16-bit narrow and a 32-bit wide type");
  std::uint32_t bits = 0;  // the default reads as 0
  bool wide = true;
  /// The element as either_view's read gives it.
  LINATTN_HOST_DEVICE Wide value() const {
    if (wide) return __builtin_bit_cast(Wide, bits);
    return static_cast<Wide>(__builtin_bit_cast(Narrow, static_cast<std::uint16_t>(bits)));
  }
};

/// A view whose elements are stored either as `Narrow` or as `Wide` (both const or both
/// mutable), chosen by the view it is made from; reads give a `Wide` value, `store` converts a
/// `Wide` value to the stored type. The shape and strides count elements of the stored type.
template <class Narrow, class Wide, int Rank>
class either_view : public detail::view_layout<Rank> {
  static_assert(std::is_const_v<Narrow> == std::is_const_v<Wide>, "either_view: both types const or both mutable");
  using layout = detail::view_layout<Rank>;
  using narrow_t = std::remove_cv_t<Narrow>;
  using wide_t = std::remove_cv_t<Wide>;
  using void_t = std::conditional_t<std::is_const_v<Narrow>, const void, void>;

 public:
  using narrow_type = Narrow;  // the two element types a view may hold
  using wide_type = Wide;
  using value_type = wide_t;  // what a read gives

  constexpr either_view() = default;
  /// From a view of the narrow type (a mutable one converts to a const either_view).
  template <class U>
    requires(std::is_same_v<std::remove_cv_t<U>, narrow_t> && std::is_convertible_v<U*, Narrow*>)
  constexpr either_view(const tensor_view<U, Rank>& v)  // NOLINT(google-explicit-constructor)
      : layout(v.extents(), v.strides()), data_(v.data()), wide_(false) {}
  /// From a view of the wide type.
  template <class U>
    requires(std::is_same_v<std::remove_cv_t<U>, wide_t> && std::is_convertible_v<U*, Wide*>)
  constexpr either_view(const tensor_view<U, Rank>& v)  // NOLINT(google-explicit-constructor)
      : layout(v.extents(), v.strides()), data_(v.data()), wide_(true) {}
  /// A mutable either_view converts to a const one.
  template <class N, class W>
    requires(std::is_same_v<const N, Narrow> && std::is_same_v<const W, Wide> && !std::is_const_v<N>)
  constexpr either_view(const either_view<N, W, Rank>& o)  // NOLINT(google-explicit-constructor)
      : layout(o.extents(), o.strides()), data_(o.data()), wide_(o.wide()) {}

  /// The first element's address (the stored type is `wide() ? Wide : Narrow`).
  LINATTN_HOST_DEVICE constexpr void_t* data() const { return data_; }
  /// True when the elements are stored as `Wide`.
  LINATTN_HOST_DEVICE constexpr bool wide() const { return wide_; }
  /// Bytes per stored element.
  constexpr index_t element_bytes() const { return wide_ ? index_t(sizeof(Wide)) : index_t(sizeof(Narrow)); }
  /// True when the caller supplied this view (as tensor_view::given).
  constexpr bool given() const { return data_ != nullptr || this->has_shape(); }

  /// The element at idx, as a `Wide` value; no bounds checks (validation happens once per call).
  template <class... I>
    requires(sizeof...(I) == Rank)
  LINATTN_HOST_DEVICE constexpr wide_t operator()(I... idx) const {
    const index_t off = this->offset(idx...);
    if (wide_) return static_cast<const Wide*>(data_)[off];
    return static_cast<wide_t>(static_cast<const Narrow*>(data_)[off]);
  }
  /// The element at idx as stored, converted later by its value() (stored_element).
  template <class... I>
    requires(sizeof...(I) == Rank)
  LINATTN_HOST_DEVICE stored_element<narrow_t, wide_t> stored(I... idx) const {
    const index_t off = this->offset(idx...);
    if (wide_) return {__builtin_bit_cast(std::uint32_t, static_cast<const Wide*>(data_)[off]), true};
    return {__builtin_bit_cast(std::uint16_t, static_cast<const Narrow*>(data_)[off]), false};
  }
  /// Writes x at idx, rounded to the stored type.
  template <class... I>
    requires(sizeof...(I) == Rank && !std::is_const_v<Narrow>)
  LINATTN_HOST_DEVICE void store(wide_t x, I... idx) const {
    const index_t off = this->offset(idx...);
    if (wide_) static_cast<Wide*>(data_)[off] = x;
    else static_cast<Narrow*>(data_)[off] = static_cast<narrow_t>(x);
  }

 private:
  void_t* data_ = nullptr;
  bool wide_ = false;
};

namespace detail {
template <class T>
inline constexpr bool narrow_input = !std::is_same_v<state_t<T>, T>;  // a 16-bit input type
}  // namespace detail

/// A rule input's coefficient view for inputs of element type T: `tensor_view<const T, Rank>`
/// for float and double; for a 16-bit T, T or float elements (`either_view`).
template <class T, int Rank>
using coefficient_view = std::conditional_t<detail::narrow_input<T>, either_view<const T, const state_t<T>, Rank>,
                                            tensor_view<const T, Rank>>;

/// The gradient of a coefficient (dg, dbeta, ...), an output: as coefficient_view, mutable.
template <class T, int Rank>
using coefficient_gradient_view =
    std::conditional_t<detail::narrow_input<T>, either_view<T, state_t<T>, Rank>, tensor_view<T, Rank>>;

/// x(idx...) loaded for a later read: an either_view's element as stored (stored_element), a
/// plain view's element itself. value_of gives its value, as x(idx...) would have.
template <class T, int Rank, class... I>
LINATTN_HOST_DEVICE inline std::remove_cv_t<T> load_ahead(const tensor_view<T, Rank>& x, I... idx) {
  return x(idx...);
}
template <class N, class W, int Rank, class... I>
LINATTN_HOST_DEVICE inline auto load_ahead(const either_view<N, W, Rank>& x, I... idx) {
  return x.stored(idx...);
}
template <class X>
LINATTN_HOST_DEVICE inline X value_of(X x) {
  return x;
}
template <class N, class W>
LINATTN_HOST_DEVICE inline W value_of(const stored_element<N, W>& x) {
  return x.value();
}

/// out(idx...) = x, rounded to out's element type (for either kind of view).
template <class T, int Rank, class X, class... I>
LINATTN_HOST_DEVICE inline void store_value(const tensor_view<T, Rank>& out, X x, I... idx) {
  out(idx...) = static_cast<T>(x);
}
template <class N, class W, int Rank, class X, class... I>
LINATTN_HOST_DEVICE inline void store_value(const either_view<N, W, Rank>& out, X x, I... idx) {
  out.store(static_cast<std::remove_cv_t<W>>(x), idx...);
}

}  // namespace linattn
