// SPDX-License-Identifier: MIT
/// \file
/// The CPU workers of the two linear families: which block worker (chunk or whole sequence)
/// and which token worker the shared schedulers (runtime/schedulers.hpp) run for a rule.
/// The additive family (Hebbian, scalar and vector decay) and the Householder family (Delta,
/// GatedDelta, Longhorn, NLMS) share the token recurrence; their block workers differ. The
/// diagonal-plus-low-rank family (RWKV-7) shares the token recurrence (a branch of it) and the
/// schedulers, with a block worker of its own; it has no backward pass.
#pragma once

#include <concepts>
#include <type_traits>

#include "../../core/family.hpp"
#include "additive_worker.hpp"
#include "dplr_worker.hpp"
#include "householder_worker.hpp"
#include "token_worker.hpp"

namespace linattn::cpu {

/// Families whose rules the linear workers run.
template <class Family>
concept linear_family = std::same_as<Family, additive_family> || std::same_as<Family, householder_family>;
/// Families whose forward forms the linear workers run (the backward ones: linear_family).
template <class Family>
concept linear_forward_family = linear_family<Family> || std::same_as<Family, dplr_family>;

/// Block worker of a linear rule: `Cum` is the type of the gate cumsums (double over a whole
/// sequence in the parallel form, the state type within a chunk).
template <class Rule, class T, class A, class Cum>
using linear_block_worker = std::conditional_t<
    std::same_as<typename Rule::family, householder_family>, householder_worker<Rule, T, A, Cum>,
    std::conditional_t<std::same_as<typename Rule::family, dplr_family>, dplr_worker<Rule, T, A, Cum>,
                       additive_worker<Rule, T, A, Cum>>>;

}  // namespace linattn::cpu
