// SPDX-License-Identifier: MIT
/// \file
/// `parallel_forward<Rule>`: Masked L x L (quadratic) form: every output row from all earlier tokens at once.
#pragma once

#include "entry_point.hpp"

namespace linattn {

/// (Its contract: forms/declarations.hpp.)
template <rule Rule, class T>
void parallel_forward(const inputs_t<Rule, T>& in, tensor_view<T, 4> out, const options<state_t<T>>& opt) {
  detail::run_forward<detail::form::parallel, Rule, T>(in, out, opt);
}

}  // namespace linattn
