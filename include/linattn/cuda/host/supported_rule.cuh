// SPDX-License-Identifier: MIT
/// \file
/// Which rules and input types the CUDA kernels implement; anything else fails to compile
/// with a message that says so.
#pragma once

#include "../../core/family.hpp"
#include "../kernels/rule_coefficients.cuh"
#include "../tile/scalar.cuh"

namespace linattn::cuda::detail {

/// The forms of a call, for the checks below: the token recurrence (recurrent_forward,
/// decode_step, verify_drafts), the chunkwise forward and the chunkwise backward run every
/// decay kind.
enum class kernel_kind { token, chunk, chunk_gradients };

template <class Rule, class T, kernel_kind Kind = kernel_kind::chunk>
constexpr void require_supported() {
  static_assert(sizeof(cuda_family<typename Rule::family>) > 0);  // fails for families without kernels
  static_assert(is_cuda_scalar<T>, "linattn::cuda: inputs must be float, __half or __nv_bfloat16");
}

}  // namespace linattn::cuda::detail
