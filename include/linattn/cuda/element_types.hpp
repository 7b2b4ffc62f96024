// SPDX-License-Identifier: MIT
/// \file
/// The 16-bit input types of the CUDA backend (__half, __nv_bfloat16) and their state type,
/// fp32 (docs/design.md#conventions). Plain C++: a host-compiled translation unit that declares
/// views or calls of these types (a binding, say) includes it and agrees with nvcc on every
/// rule's `inputs<T>` (their coefficient views depend on the state type).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../core/family.hpp"

namespace linattn {

template <>
struct state_type<__half> {
  using type = float;
};
template <>
struct state_type<__nv_bfloat16> {
  using type = float;
};

}  // namespace linattn
