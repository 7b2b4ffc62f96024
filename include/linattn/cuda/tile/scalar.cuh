// SPDX-License-Identifier: MIT
/// \file
/// Input scalar types of the CUDA backend (float, __half, __nv_bfloat16): conversions to and
/// from fp32 and the operand type of the tensor-core products (their fp32 state type:
/// ../element_types.hpp).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../../core/family.hpp"
#include "../element_types.hpp"

namespace linattn::cuda::detail {

__host__ __device__ inline float to_float(float x) { return x; }
__host__ __device__ inline float to_float(__half x) { return __half2float(x); }
__host__ __device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__host__ __device__ inline T from_float(float x);
template <>
__host__ __device__ inline float from_float<float>(float x) { return x; }
template <>
__host__ __device__ inline __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__host__ __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <class T>
inline constexpr bool is_cuda_scalar =
    std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

}  // namespace linattn::cuda::detail
