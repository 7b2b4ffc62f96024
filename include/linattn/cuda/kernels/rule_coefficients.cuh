// SPDX-License-Identifier: MIT
/// \file
/// Per-token coefficients of a rule read on the device, in fp32: the log gate (0 for rules
/// without decay) and the write strength beta (1 for the additive family). They call the
/// rule's own LINATTN_HOST_DEVICE functions, the same ones the CPU uses.
#pragma once

#include <type_traits>

#include "../../core/family.hpp"
#include "../tile/scalar.cuh"

namespace linattn::cuda::detail {

template <class Rule>
inline constexpr bool corrects = std::is_same_v<typename Rule::family, householder_family>;

template <class Rule, class T>
__device__ inline float log_gate(const typename Rule::template inputs<T>& in, index_t b, index_t t, index_t hv) {
  if constexpr (Rule::decay == decay_kind::scalar) return to_float(Rule::log_gate(in, b, t, hv));
  else return 0.0f;
}

/// beta_t given ||k_t||^2 (Longhorn needs the norm; the other rules ignore it).
template <class Rule, class T>
__device__ inline float write_strength(const typename Rule::template inputs<T>& in, index_t b, index_t t, index_t hv,
                                       float key_sqnorm) {
  if constexpr (corrects<Rule>) return Rule::template beta<T, float>(in, b, t, hv, key_sqnorm);
  else return 1.0f;
}

}  // namespace linattn::cuda::detail
