// SPDX-License-Identifier: MIT
/// \file
/// `chunkwise_forward<Rule>`: Chunkwise form: intra-chunk parallel products plus an inter-chunk state recurrence
/// (chunk length options::chunk_size, 1..256; the last chunk may be shorter).
#pragma once

#include "entry_point.hpp"

namespace linattn {

/// (Its contract: forms/declarations.hpp.)
template <rule Rule, class T>
void chunkwise_forward(const inputs_t<Rule, T>& in, tensor_view<T, 4> out, const options<state_t<T>>& opt) {
  detail::run_forward<detail::form::chunkwise, Rule, T>(in, out, opt);
}

}  // namespace linattn
