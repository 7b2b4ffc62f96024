// SPDX-License-Identifier: MIT
/// \file
/// `parallel_forward<Rule>`: Masked L x L (quadratic) form: every output row from all earlier tokens at once.
#pragma once

#include <type_traits>

#include "../core/family.hpp"
#include "../core/options.hpp"
#include "../core/tensor_view.hpp"
#include "../cpu/additive_kernels.hpp"
#include "../cpu/drivers.hpp"
#include "../cpu/householder_kernels.hpp"
#include "../cpu/ttt_drivers.hpp"
#include "dispatch.hpp"

namespace linattn {

/// Computes out `[B, T, HV, V]` for the rule's inputs (q, k `[B, T, H, K]`, v `[B, T, HV, V]`, ...).
/// Reads options::initial_state and writes options::final_state (`[N, HV, K, V]`) when given.
/// Throws linattn::error, before writing anything, when an argument is invalid.
template <rule Rule, class T>
void parallel_forward(const std::type_identity_t<typename Rule::template inputs<std::remove_const_t<T>>>& in,
                  tensor_view<T, 4> out, const options<state_t<T>>& opt = {}) {
  detail::parallel_algorithm<typename Rule::family>::template run<Rule>(in, out, opt);
}

}  // namespace linattn
