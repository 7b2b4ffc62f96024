// SPDX-License-Identifier: MIT
/// \file
/// CPU kernels of the Householder family (Delta, GatedDelta, Longhorn: one driver, the rules
/// differ only in their per-token beta and gate).
#pragma once

#include "../core/family.hpp"
#include "householder_span.hpp"
#include "kernels.hpp"
#include "token_recurrence.hpp"

namespace linattn::cpu {

template <>
struct kernels<householder_family> {
  static constexpr bool available = true;
  template <class Rule, class T, class A, class Cum>
  using span = householder_span<Rule, T, A, Cum>;
  template <class Rule, class T, class A>
  using tokens = token_recurrence<Rule, T, A>;
};

}  // namespace linattn::cpu
