// SPDX-License-Identifier: MIT
/// \file
/// The CPU entry points of every state-based rule, declared once with their default arguments:
/// the forms' headers (chunkwise.hpp, recurrent.hpp, ...) define them, and <linattn/precompiled.hpp>
/// declares them without the definitions for code that links the `linattn::precompiled`
/// library instead of compiling them. Light on purpose: core types and views only.
#pragma once

#include <type_traits>

#include "../core/backward.hpp"
#include "../core/family.hpp"
#include "../core/options.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

/// The rule's inputs for element type T (T may be given const).
template <class Rule, class T>
using inputs_t = std::type_identity_t<typename Rule::template inputs<std::remove_const_t<T>>>;

// The forward forms compute out `[B, T, HV, V]` for the rule's inputs (q, k `[B, T, H, K]`,
// v `[B, T, HV, V]`, ...), reading options::initial_state and writing options::final_state
// (`[N, HV, K, V]`) when given. Every entry point throws linattn::error, before writing
// anything, when an argument is invalid.

/// Chunkwise form (forms/chunkwise.hpp): out `[B, T, HV, V]` from the rule's inputs.
template <rule Rule, class T>
void chunkwise_forward(const inputs_t<Rule, T>& in, tensor_view<T, 4> out, const options<state_t<T>>& opt = {});

/// Recurrent form (forms/recurrent.hpp): the definition, token by token.
template <rule Rule, class T>
void recurrent_forward(const inputs_t<Rule, T>& in, tensor_view<T, 4> out, const options<state_t<T>>& opt = {});

/// Parallel form (forms/parallel.hpp): all pairs of tokens at once.
template <rule Rule, class T>
void parallel_forward(const inputs_t<Rule, T>& in, tensor_view<T, 4> out, const options<state_t<T>>& opt = {});

/// One decode step per sequence (forms/decode.hpp), the state `[B, HV, K, V]` updated in place.
template <rule Rule, class T>
void decode_step(const inputs_t<Rule, T>& in, tensor_view<T, 4> out, tensor_view<state_t<T>, 4> state,
                 const options<state_t<T>>& opt = {});

// The backward forms write the gradients of L = <grad_out, out> + <grad_final_state, final
// state> with respect to every input of the rule (grads: dq, dk `[B, T, H, K]`, dv
// `[B, T, HV, V]`, and dg, dbeta or ddelta as the rule has them; all required) and, when
// options::grad_initial_state is given, to the initial state. `grad_out` is `[B, T, HV, V]`;
// the inputs and options are those of the forward call (options::final_state unset). With
// grouped value heads, dq and dk of a q/k head are summed over its value heads.

/// Gradients by the chunkwise algorithm (forms/chunkwise_backward.hpp).
template <rule Rule, class G>
void chunkwise_backward(const inputs_t<Rule, G>& in, tensor_view<G, 4> grad_out,
                        const std::type_identity_t<gradients_t<Rule, std::remove_const_t<G>>>& grads,
                        const backward_options<state_t<std::remove_const_t<G>>>& opt = {});

/// Gradients token by token in reverse (forms/recurrent_backward.hpp).
template <rule Rule, class G>
void recurrent_backward(const inputs_t<Rule, G>& in, tensor_view<G, 4> grad_out,
                        const std::type_identity_t<gradients_t<Rule, std::remove_const_t<G>>>& grads,
                        const backward_options<state_t<std::remove_const_t<G>>>& opt = {});

}  // namespace linattn
