// SPDX-License-Identifier: MIT
/// \file
/// `decode_step<Rule>`: advances the state of every sequence by its new token(s) in place and
/// writes their outputs; the serving path of a recurrent layer.
#pragma once

#include "entry_point.hpp"

namespace linattn {

/// One step per sequence: inputs `[B, T, ...]` with B = sequences and usually T = 1 (T > 1
/// runs the tokens in order), out `[B, T, HV, V]`, `state` `[B, HV, K, V]` read and updated in
/// place. options::initial_state / final_state / cu_seqlens must be left unset.
template <rule Rule, class T>
void decode_step(const inputs_t<Rule, T>& in, tensor_view<T, 4> out, tensor_view<state_t<T>, 4> state,
                 const options<state_t<T>>& opt) {
  detail::run_forward<detail::form::decode, Rule, T>(in, out, opt, &state);
}

}  // namespace linattn
