// SPDX-License-Identifier: MIT
/// \file
/// `recurrent_forward<Rule>`: Token-by-token recurrence: the definition of every rule. Sequential over T.
#pragma once

#include "entry_point.hpp"

namespace linattn {

/// (Its contract: forms/declarations.hpp.)
template <rule Rule, class T>
void recurrent_forward(const inputs_t<Rule, T>& in, tensor_view<T, 4> out, const options<state_t<T>>& opt) {
  detail::run_forward<detail::form::recurrent, Rule, T>(in, out, opt);
}

}  // namespace linattn
