// SPDX-License-Identifier: MIT
/// \file
/// `recurrent_backward<Rule>`: the gradients of recurrent_forward by the definition: the recurrence
/// run backwards token by token, the state checkpointed every options::chunk_size tokens and
/// recomputed inside each chunk (docs/backward.md).
#pragma once

#include "entry_point.hpp"

namespace linattn {

/// (Its contract: forms/declarations.hpp.)
template <rule Rule, class G>
void recurrent_backward(const inputs_t<Rule, G>& in, tensor_view<G, 4> grad_out,
                        const std::type_identity_t<gradients_t<Rule, std::remove_const_t<G>>>& grads,
                        const backward_options<state_t<std::remove_const_t<G>>>& opt) {
  static_assert(has_gradients<Rule>, "linattn::recurrent_backward: this rule has no backward pass (no Rule::gradients<T>)");
  detail::run_backward<detail::form::recurrent_backward, Rule, G>(in, grad_out, grads, opt);
}

}  // namespace linattn
