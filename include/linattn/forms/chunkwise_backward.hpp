// SPDX-License-Identifier: MIT
/// \file
/// `chunkwise_backward<Rule>`: the gradients of chunkwise_forward by the chunked algorithm: the
/// chunk-start states from a forward state pass, then the reverse state-gradient recurrence
/// across chunks with block products inside them (for the delta rules, the backward of the
/// WY/UT representation); docs/backward.md.
#pragma once

#include "entry_point.hpp"

namespace linattn {

/// (Its contract: forms/declarations.hpp.)
template <rule Rule, class G>
void chunkwise_backward(const inputs_t<Rule, G>& in, tensor_view<G, 4> grad_out,
                        const std::type_identity_t<gradients_t<Rule, std::remove_const_t<G>>>& grads,
                        const backward_options<state_t<std::remove_const_t<G>>>& opt) {
  static_assert(has_gradients<Rule>, "linattn::chunkwise_backward: this rule has no backward pass (no Rule::gradients<T>)");
  detail::run_backward<detail::form::chunkwise_backward, Rule, G>(in, grad_out, grads, opt);
}

}  // namespace linattn
