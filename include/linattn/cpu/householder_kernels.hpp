// SPDX-License-Identifier: MIT
/// \file
/// CPU kernels of the Householder family (Delta, GatedDelta, Longhorn: one driver, the rules
/// differ only in their per-token beta and gate).
#pragma once

#include "../core/family.hpp"
#include "householder_recurrent.hpp"
#include "householder_span.hpp"
#include "kernels.hpp"

namespace linattn::cpu {

template <>
struct kernels<householder_family> {
  static constexpr bool available = true;
  template <class Rule, class T, class A, class Cum>
  using span = householder_span<Rule, T, A, Cum>;
  template <class Rule, class T, class A>
  using tokens = householder_recurrent<Rule, T, A>;
};

}  // namespace linattn::cpu
