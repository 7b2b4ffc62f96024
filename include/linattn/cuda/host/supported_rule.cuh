// SPDX-License-Identifier: MIT
/// \file
/// Which rules and input types the CUDA kernels implement; anything else fails to compile
/// with a message that says so. `has_chunk_gradients<Rule>` says whether chunkwise_backward
/// takes the rule.
#pragma once

#include "../../core/family.hpp"
#include "../kernels/rule_coefficients.cuh"
#include "../tile/scalar.cuh"

namespace linattn::cuda::detail {

/// The forms of a call, for the checks below: the token recurrence (recurrent_forward,
/// decode_step, verify_drafts) and the chunkwise forward run every decay kind; the chunkwise
/// backward runs scalar decays.
enum class kernel_kind { token, chunk, chunk_gradients };

template <class Rule>
inline constexpr bool has_chunk_gradients = Rule::decay != decay_kind::vector;

template <class Rule, class T, kernel_kind Kind = kernel_kind::chunk>
constexpr void require_supported() {
  static_assert(sizeof(cuda_family<typename Rule::family>) > 0);  // fails for families without kernels
  static_assert(Kind != kernel_kind::chunk_gradients || has_chunk_gradients<Rule>,
                "linattn::cuda: per-key (vector) decay has no chunkwise backward on CUDA yet; use the CPU's "
                "chunkwise_backward");
  static_assert(is_cuda_scalar<T>, "linattn::cuda: inputs must be float, __half or __nv_bfloat16");
}

}  // namespace linattn::cuda::detail
