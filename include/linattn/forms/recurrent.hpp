// SPDX-License-Identifier: MIT
/// \file
/// `recurrent_forward<Rule>`: Token-by-token recurrence: the definition of every rule. Sequential over T.
#pragma once

#include "entry_point.hpp"

namespace linattn {

/// Computes out `[B, T, HV, V]` for the rule's inputs (q, k `[B, T, H, K]`, v `[B, T, HV, V]`, ...).
/// Reads options::initial_state and writes options::final_state (`[N, HV, K, V]`) when given.
/// Throws linattn::error, before writing anything, when an argument is invalid.
template <rule Rule, class T>
void recurrent_forward(const inputs_t<Rule, T>& in, tensor_view<T, 4> out, const options<state_t<T>>& opt) {
  detail::run_forward<detail::form::recurrent, Rule, T>(in, out, opt);
}

}  // namespace linattn
