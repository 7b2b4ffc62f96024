// SPDX-License-Identifier: MIT
/// \file
/// Per-token coefficients of a rule read on the device, in fp32: the log gate (0 for rules
/// without decay; per key dimension for vector decays) and the write strength beta (1 for the
/// additive family). They call the
/// rule's own LINATTN_HOST_DEVICE functions, the same ones the CPU uses.
#pragma once

#include "../../core/family.hpp"
#include "../tile/scalar.cuh"

namespace linattn::cuda::detail {

/// What the kernels do per transition family: the delta (Householder) family corrects the
/// values by the state's prediction (U~ = U - W H), the additive family writes them as they
/// are. Only families with CUDA kernels specialise it; any other fails here, readably.
template <class Family>
struct cuda_family {
  static_assert(linattn::detail::always_false<Family>,
                "linattn::cuda: no CUDA kernel exists for this rule's transition family (Rule::family)");
  static constexpr bool corrects = false;  // (no follow-on errors)
};
template <>
struct cuda_family<additive_family> {
  static constexpr bool corrects = false;
};
template <>
struct cuda_family<householder_family> {
  static constexpr bool corrects = true;
};

template <class Rule>
inline constexpr bool corrects = cuda_family<typename Rule::family>::corrects;

/// A log gate floored at -110, below which exp() is exactly 0 in float (as on the CPU): a hard
/// reset (-inf) or a huge gate leaves the chunk's cumulative sums finite. NaN stays NaN.
__device__ inline float floored_log_gate(float g) { return g < -110.0f ? -110.0f : g; }

/// The scalar log gate of token t as a float, floored (0 for rules without a scalar decay).
template <class Rule, class T>
__device__ inline float log_gate(const typename Rule::template inputs<T>& in, index_t b, index_t t, index_t hv) {
  if constexpr (Rule::decay == decay_kind::scalar) return floored_log_gate(to_float(Rule::log_gate(in, b, t, hv)));
  else return 0.0f;
}

/// The log gate of key dimension d (per-key decays), floored.
template <class Rule, class T>
__device__ inline float key_log_gate(const typename Rule::template inputs<T>& in, index_t b, index_t t, index_t hv,
                                     index_t d) {
  return floored_log_gate(to_float(Rule::log_gate(in, b, t, hv, d)));
}

/// Rules whose beta is their input beta as stored, whatever the key's norm (`beta_is_input`):
/// the kernels load it ahead, before the key tile is in.
template <class Rule>
inline constexpr bool beta_is_input = requires { requires Rule::beta_is_input; };

/// beta_t given ||k_t||^2 (Longhorn needs the norm; the other rules ignore it).
template <class Rule, class T>
__device__ inline float write_strength(const typename Rule::template inputs<T>& in, index_t b, index_t t, index_t hv,
                                       float key_sqnorm) {
  if constexpr (corrects<Rule>) return Rule::template beta<T, float>(in, b, t, hv, key_sqnorm);
  else return 1.0f;
}

}  // namespace linattn::cuda::detail
