// SPDX-License-Identifier: MIT
/// \file
/// Which rules and input types the CUDA kernels implement; anything else fails to compile
/// with a message that says so.
#pragma once

#include "../../core/family.hpp"
#include "../kernels/rule_coefficients.cuh"
#include "../tile/scalar.cuh"

namespace linattn::cuda::detail {

/// Every CUDA form (the token recurrence, the chunkwise forward and backward) runs every decay
/// kind of the additive and Householder families.
template <class Rule, class T>
constexpr void require_supported() {
  static_assert(sizeof(cuda_family<typename Rule::family>) > 0);  // fails for families without kernels
  static_assert(is_cuda_scalar<T>, "linattn::cuda: inputs must be float, __half or __nv_bfloat16");
}

}  // namespace linattn::cuda::detail
