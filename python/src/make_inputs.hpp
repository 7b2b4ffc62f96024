// SPDX-License-Identifier: MIT
/// \file
/// A rule's `inputs<T>` and `gradients<T>` from DLPack arrays (q, k, v, then the rule's extra
/// arrays in the order of rule_fields.hpp), and the state and sequence fields of a call's
/// options. Shared by the CPU and the CUDA modules.
#pragma once

#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <linattn/core/backward.hpp>
#include <linattn/core/options.hpp>

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
      target.*(f.member) = as_member_view<view_t>(a, f.name, where);
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

/// The rule's gradients<T> from dq, dk, dv and its extra gradient arrays (in its extras' order).
template <class Rule, class T>
gradients_t<Rule, T> make_gradients(const array& dq, const array& dk, const array& dv, const arrays& dextras,
                                    memory where) {
  gradients_t<Rule, T> grads{};
  grads.dq = as_view<T, 4>(dq, "dq", where);
  grads.dk = as_view<T, 4>(dk, "dk", where);
  grads.dv = as_view<T, 4>(dv, "dv", where);
  fill_views(grads, fields<Rule>::template gradients<T>(), dextras, where);
  return grads;
}

/// A forward call's options: scale, q/k normalisation, initial_state in, final_state out,
/// cu_seqlens (read where `seqlens` says).
template <class T>
options<T> make_options(double scale, bool normalize_qk, const maybe_array& initial_state, const maybe_array& final_state,
                        const maybe_array& cu_seqlens, memory where, memory seqlens) {
  options<T> opt;
  opt.scale = scale;
  opt.normalize_qk = normalize_qk;
  opt.initial_state = as_view<const T, 4>(initial_state, "initial_state", where);
  opt.final_state = as_view<T, 4>(final_state, "final_state", where);
  opt.cu_seqlens = as_seqlens(cu_seqlens, seqlens);
  return opt;
}

/// A backward call's options: scale, q/k normalisation, initial_state and grad_final_state in,
/// grad_initial_state out, cu_seqlens.
template <class T>
backward_options<T> make_backward_options(double scale, bool normalize_qk, const maybe_array& initial_state,
                                          const maybe_array& grad_final_state, const maybe_array& grad_initial_state,
                                          const maybe_array& cu_seqlens, memory where, memory seqlens) {
  backward_options<T> opt;
  opt.scale = scale;
  opt.normalize_qk = normalize_qk;
  opt.initial_state = as_view<const T, 4>(initial_state, "initial_state", where);
  opt.cu_seqlens = as_seqlens(cu_seqlens, seqlens);
  opt.grad_final_state = as_view<const T, 4>(grad_final_state, "grad_final_state", where);
  opt.grad_initial_state = as_view<T, 4>(grad_initial_state, "grad_initial_state", where);
  return opt;
}

}  // namespace linattn::python
