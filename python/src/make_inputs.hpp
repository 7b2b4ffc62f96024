// SPDX-License-Identifier: MIT
/// \file
/// A rule's `inputs<T>` and `gradients<T>` from DLPack arrays: q, k, v, then the rule's extra
/// arrays in the order of rule_fields.hpp. Shared by the CPU and the CUDA modules.
#pragma once

#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "rule_fields.hpp"
#include "views.hpp"

namespace linattn::python {

using maybe_array = std::optional<array>;
using arrays = std::vector<maybe_array>;

/// Points each member of `target` named by `fs` (a tuple of field) at the matching array.
template <class Target, class Fields>
void fill_views(Target& target, const Fields& fs, const arrays& given, memory where) {
  constexpr std::size_t n = std::tuple_size_v<Fields>;
  if (given.size() != n)
    bad_argument("extras", "has " + std::to_string(given.size()) + " arrays, this rule takes " + std::to_string(n));
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    const auto one = [&](const auto& f, const maybe_array& a) {
      using view_t = std::remove_cvref_t<decltype(target.*(f.member))>;
      target.*(f.member) = as_view<typename view_t::element_type, view_t::rank>(a, f.name, where);
    };
    (one(std::get<I>(fs), given[I]), ...);
  }(std::make_index_sequence<n>{});
}

/// The rule's inputs<T> from q, k, v, its extra arrays and its scalar parameter `number` (NLMS
/// eps_k, RLS delta; ignored by the other rules).
template <class Rule, class T>
typename Rule::template inputs<T> make_inputs(const array& q, const array& k, const array& v, const arrays& extras,
                                              double number, memory where) {
  typename Rule::template inputs<T> in{};
  in.q = as_view<const T, 4>(q, "q", where);
  in.k = as_view<const T, 4>(k, "k", where);
  in.v = as_view<const T, 4>(v, "v", where);
  fill_views(in, fields<Rule>::template inputs<T>(), extras, where);
  if constexpr (!std::is_null_pointer_v<decltype(fields<Rule>::template number<T>())>)
    in.*(fields<Rule>::template number<T>().member) = number;
  return in;
}

}  // namespace linattn::python
