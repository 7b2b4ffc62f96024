// SPDX-License-Identifier: MIT
/// \file
/// `decode_step<Rule>`: advances the state of every sequence by its new token(s) in place and
/// writes their outputs; the serving path of a recurrent layer.
#pragma once

#include <type_traits>

#include "../core/dispatch.hpp"
#include "../core/family.hpp"
#include "../core/options.hpp"
#include "../core/tensor_view.hpp"
#include "../core/validate.hpp"
#include "../cpu/algorithms.hpp"
#include "../cpu/io/qk_normalization.hpp"
#include "declarations.hpp"

namespace linattn {

/// One step per sequence: inputs `[B, T, ...]` with B = sequences and usually T = 1 (T > 1
/// runs the tokens in order), out `[B, T, HV, V]`, `state` `[B, HV, K, V]` read and updated in
/// place. options::initial_state / final_state / cu_seqlens must be left unset.
template <rule Rule, class T>
void decode_step(const inputs_t<Rule, T>& in, tensor_view<T, 4> out, tensor_view<state_t<T>, 4> state,
                 const options<state_t<T>>& opt) {
  if constexpr (cpu::check_element<std::remove_const_t<T>>() && detail::meets_contract<Rule>) {
    const detail::problem p = detail::validate<Rule>(detail::form::decode, in, out, opt, &state);
    const cpu::qk_normalized<inputs_t<Rule, T>> qk(in, opt.normalize_qk, opt.threads);
    detail::algorithm<typename Rule::family, detail::form::decode>::template run<Rule>(qk.inputs(), out, state, opt, p);
  }
}

}  // namespace linattn
