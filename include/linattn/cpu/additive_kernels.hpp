// SPDX-License-Identifier: MIT
/// \file
/// CPU kernels of the additive family (Hebbian, scalar and vector decay).
#pragma once

#include "../core/family.hpp"
#include "additive_span.hpp"
#include "kernels.hpp"
#include "token_recurrence.hpp"

namespace linattn::cpu {

template <>
struct kernels<additive_family> {
  static constexpr bool available = true;
  template <class Rule, class T, class A, class Cum>
  using span = additive_span<Rule, T, A, Cum>;
  template <class Rule, class T, class A>
  using tokens = token_recurrence<Rule, T, A>;
};

}  // namespace linattn::cpu
