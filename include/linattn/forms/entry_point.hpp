// SPDX-License-Identifier: MIT
/// \file
/// The body every CPU entry point shares (forms/*.hpp): the element type and the rule's family
/// contract checked at compile time, the call validated once (core/validate.hpp), q and k
/// normalised when options::normalize_qk asks, then the dispatch table's cell for the rule's
/// family and the form (core/dispatch.hpp).
#pragma once

#include <type_traits>

#include "../core/backward.hpp"
#include "../core/dispatch.hpp"
#include "../core/family.hpp"
#include "../core/options.hpp"
#include "../core/tensor_view.hpp"
#include "../core/validate.hpp"
#include "../core/validate_backward.hpp"
#include "../cpu/algorithms.hpp"
#include "../cpu/io/qk_normalization.hpp"
#include "declarations.hpp"

namespace linattn::detail {

/// Forward form F (`state`: decode_step's state, read and written in place; null otherwise).
template <form F, class Rule, class T>
void run_forward(const inputs_t<Rule, T>& in, const tensor_view<T, 4>& out, const options<state_t<T>>& opt,
                 const tensor_view<state_t<T>, 4>* state = nullptr) {
  if constexpr (cpu::check_element<std::remove_const_t<T>>() && meets_contract<Rule>) {
    const problem p = validate<Rule>(F, in, out, opt, state);
    const cpu::qk_normalized<inputs_t<Rule, T>> qk(in, opt.normalize_qk, opt.threads);
    if constexpr (F == form::decode) algorithm<typename Rule::family, F>::template run<Rule>(qk.inputs(), out, opt, p, *state);
    else algorithm<typename Rule::family, F>::template run<Rule>(qk.inputs(), out, opt, p);
  }
}

/// Backward form F; the gradients of q and k are chained through the normalisation when
/// options::normalize_qk normalised them.
template <form F, class Rule, class G>
void run_backward(const inputs_t<Rule, G>& in, const tensor_view<G, 4>& grad_out,
                  const gradients_t<Rule, std::remove_const_t<G>>& grads,
                  const backward_options<state_t<std::remove_const_t<G>>>& opt) {
  using T = std::remove_const_t<G>;
  if constexpr (cpu::check_element<T>() && meets_contract<Rule> && has_gradients<Rule>) {
    const tensor_view<const T, 4> dout = grad_out;
    const problem p = validate_backward<Rule>(F, in, dout, grads, opt);
    const cpu::qk_normalized<inputs_t<Rule, G>> qk(in, opt.normalize_qk, opt.threads);
    algorithm<typename Rule::family, F>::template run<Rule>(qk.inputs(), dout, grads, opt, p);
    if (opt.normalize_qk) cpu::chain_qk_normalization(in, grads, opt.threads);
  }
}

}  // namespace linattn::detail
