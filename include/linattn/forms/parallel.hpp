// SPDX-License-Identifier: MIT
/// \file
/// `parallel_forward<Rule>`: Masked L x L (quadratic) form: every output row from all earlier tokens at once.
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

/// Computes out `[B, T, HV, V]` for the rule's inputs (q, k `[B, T, H, K]`, v `[B, T, HV, V]`, ...).
/// Reads options::initial_state and writes options::final_state (`[N, HV, K, V]`) when given.
/// Throws linattn::error, before writing anything, when an argument is invalid.
template <rule Rule, class T>
void parallel_forward(const inputs_t<Rule, T>& in, tensor_view<T, 4> out, const options<state_t<T>>& opt) {
  if constexpr (cpu::check_element<std::remove_const_t<T>>() && detail::meets_contract<Rule>) {
    const detail::problem p = detail::validate<Rule>(detail::form::parallel, in, out, opt);
    const cpu::qk_normalized<inputs_t<Rule, T>> qk(in, opt.normalize_qk, opt.threads);
    detail::algorithm<typename Rule::family, detail::form::parallel>::template run<Rule>(qk.inputs(), out, opt, p);
  }
}

}  // namespace linattn
