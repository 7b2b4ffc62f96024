// SPDX-License-Identifier: MIT
/// \file
/// DLPack arrays (torch tensors, through nanobind) as linattn views, with the argument's name in
/// every error. The views keep the arrays' strides: nothing is copied here.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <linattn/core/error.hpp>
#include <linattn/core/options.hpp>
#include <linattn/core/tensor_view.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace linattn::python {

namespace nb = nanobind;
using array = nb::ndarray<>;

/// Where the caller's arrays must live: the CPU module takes host memory, the CUDA module device
/// memory (and cu_seqlens in either: the library reads the offsets on the host).
enum class memory { host, device, any };

/// Throws linattn::error (a ValueError in Python) naming the argument.
[[noreturn]] inline void bad_argument(const char* name, const std::string& what) {
  throw error(std::string("linattn: argument '") + name + "' " + what);
}

/// The DLPack dtype of an element type (the CUDA module adds its 16-bit types).
template <class T>
struct dlpack_dtype {
  static nb::dlpack::dtype get() { return nb::dtype<T>(); }
};

/// `a` as a rank-R view of T (its dtype, rank and memory checked; strides kept, in elements).
template <class T, int R>
tensor_view<T, R> as_view(const array& a, const char* name, memory where) {
  if (a.dtype() != dlpack_dtype<std::remove_const_t<T>>::get())
    bad_argument(name, "has the wrong dtype for this call (the binding layer converts; this is a bug)");
  if (a.ndim() != std::size_t(R))
    bad_argument(name, "has " + std::to_string(a.ndim()) + " dimensions, expected " + std::to_string(R));
  if (where == memory::host && a.device_type() != nb::device::cpu::value) bad_argument(name, "is not in host memory");
  if (where == memory::device && a.device_type() != nb::device::cuda::value)
    bad_argument(name, "is not in CUDA device memory");
  std::array<index_t, R> extents{}, strides{};
  for (int d = 0; d < R; ++d) {
    extents[std::size_t(d)] = index_t(a.shape(std::size_t(d)));
    strides[std::size_t(d)] = index_t(a.stride(std::size_t(d)));
  }
  return tensor_view<T, R>(static_cast<T*>(a.data()), extents, strides);
}

/// An optional argument: an unset view when None.
template <class T, int R>
tensor_view<T, R> as_view(const std::optional<array>& a, const char* name, memory where) {
  return a ? as_view<T, R>(*a, name, where) : tensor_view<T, R>{};
}

/// A rule's member view (a tensor_view, or a coefficient view that holds either the input type
/// or float: the one `a`'s dtype names), or unset when `a` is None.
template <class View>
View as_member_view(const std::optional<array>& a, const char* name, memory where) {
  if constexpr (requires { typename View::wide_type; }) {
    using wide = typename View::wide_type;
    if (a && a->dtype() == dlpack_dtype<std::remove_const_t<wide>>::get()) return View(as_view<wide, View::rank>(*a, name, where));
    return View(as_view<typename View::narrow_type, View::rank>(a, name, where));
  } else {
    return as_view<typename View::element_type, View::rank>(a, name, where);
  }
}

/// cu_seqlens `[N + 1]` of int32 or int64, or unset.
inline seqlens_view as_seqlens(const std::optional<array>& cu, memory where) {
  if (!cu) return {};
  if (cu->dtype() == nb::dtype<std::int64_t>()) return as_view<const std::int64_t, 1>(*cu, "cu_seqlens", where);
  if (cu->dtype() == nb::dtype<std::int32_t>()) return as_view<const std::int32_t, 1>(*cu, "cu_seqlens", where);
  bad_argument("cu_seqlens", "must hold int32 or int64 offsets");
}

}  // namespace linattn::python
