// SPDX-License-Identifier: MIT
/// \file
/// What the backward entry points add to the forward API: `backward_options` (the forward
/// options plus the state gradients), the per-rule gradient aggregate `Rule::gradients<T>`
/// (found through `gradients_t`) and `beta_partials`, the derivatives a Householder rule gives
/// of its step beta (docs/backward.md).
///
/// A rule with a backward pass defines, besides its `inputs<T>`:
///   gradients<T>              dq, dk `[B, T, H, K]`, dv `[B, T, HV, V]` and one view per
///                             differentiable input (dg, dbeta, ddelta), all outputs
///   check_gradients(g, c)     registers those extra views: c.per_token(name, view),
///                             c.per_key(name, view)
///   householder_family:       beta_derivatives(in, b, t, hv, key_sqnorm) and
///                             beta_gradient(g), the view that receives dL/d(beta's input)
///                             (an unset view when beta has no input, as for NLMS)
#pragma once

#include <type_traits>

#include "config.hpp"
#include "options.hpp"
#include "tensor_view.hpp"

namespace linattn {

/// Options of a backward call: those of the forward call it differentiates (scale,
/// chunk_size, initial_state, cu_seqlens, threads, check_finite; final_state must stay unset)
/// plus the gradients of the states.
template <class Real = float>
struct backward_options : options<Real> {
  /// Optional dL/d(final state) `[N, HV, K, V]` (an input); default zero.
  tensor_view<const Real, 4> grad_final_state{};
  /// Optional output: dL/d(initial state) `[N, HV, K, V]` (also when options::initial_state is
  /// unset: the gradient at the zero start).
  tensor_view<Real, 4> grad_initial_state{};
};

/// d beta / d(the rule's own input: beta, delta, ...) and d beta / d ||k||^2 at one token.
template <class A>
struct beta_partials {
  A d_input;
  A d_key_sqnorm;
};

namespace detail {
/// Stand-in for the gradients of a rule that has none (the entry points then fail to compile
/// with a message that says so).
struct no_gradients {};
template <class Rule, class T>
struct gradients_of {
  using type = no_gradients;
};
template <class Rule, class T>
  requires requires { typename Rule::template gradients<T>; }
struct gradients_of<Rule, T> {
  using type = typename Rule::template gradients<T>;
};
}  // namespace detail

/// The gradient aggregate of `Rule` for scalar type T (Rule::gradients<T>).
template <class Rule, class T>
using gradients_t = typename detail::gradients_of<Rule, T>::type;

/// Whether `Rule` has a backward pass (a `gradients<T>` aggregate).
template <class Rule>
inline constexpr bool has_gradients = !std::is_same_v<gradients_t<Rule, float>, detail::no_gradients>;

}  // namespace linattn
