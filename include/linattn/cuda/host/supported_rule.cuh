// SPDX-License-Identifier: MIT
/// \file
/// Which rules and input types the CUDA kernels implement; anything else fails to compile
/// with a message that says so.
#pragma once

#include <type_traits>

#include "../../core/family.hpp"
#include "../tile/scalar.cuh"

namespace linattn::cuda::detail {

template <class Rule, class T>
constexpr void require_supported() {
  static_assert(std::is_same_v<typename Rule::family, additive_family> ||
                    std::is_same_v<typename Rule::family, householder_family>,
                "linattn::cuda: no CUDA kernel exists for this rule's transition family (Rule::family)");
  static_assert(Rule::decay != decay_kind::vector,
                "linattn::cuda: per-key (vector) decay has no CUDA kernel yet; use the CPU forms");
  static_assert(is_cuda_scalar<T>, "linattn::cuda: inputs must be float, __half or __nv_bfloat16");
}

}  // namespace linattn::cuda::detail
