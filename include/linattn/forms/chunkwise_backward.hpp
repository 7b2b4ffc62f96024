// SPDX-License-Identifier: MIT
/// \file
/// `chunkwise_backward<Rule>`: the gradients of chunkwise_forward by the chunked algorithm: the
/// chunk-start states from a forward state pass, then the reverse state-gradient recurrence
/// across chunks with block products inside them (for the delta rules, the backward of the
/// WY/UT representation); docs/backward.md.
#pragma once

#include "entry_point.hpp"

namespace linattn {

/// Writes the gradients of L = <grad_out, out> + <grad_final_state, final state> with respect
/// to every input of the rule (grads: dq, dk `[B, T, H, K]`, dv `[B, T, HV, V]`, and dg,
/// dbeta or ddelta as the rule has them; all required) and, when
/// options::grad_initial_state is given, to the initial state. `grad_out` is `[B, T, HV, V]`;
/// the inputs and options are those of the forward call (options::final_state unset). With
/// grouped value heads, dq and dk of a q/k head are summed over its value heads.
/// Throws linattn::error, before writing anything, when an argument is invalid.
template <rule Rule, class G>
void chunkwise_backward(const inputs_t<Rule, G>& in, tensor_view<G, 4> grad_out,
                        const std::type_identity_t<gradients_t<Rule, std::remove_const_t<G>>>& grads,
                        const backward_options<state_t<std::remove_const_t<G>>>& opt) {
  static_assert(has_gradients<Rule>, "linattn::chunkwise_backward: this rule has no backward pass (no Rule::gradients<T>)");
  detail::run_backward<detail::form::chunkwise_backward, Rule, G>(in, grad_out, grads, opt);
}

}  // namespace linattn
