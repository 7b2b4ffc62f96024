// SPDX-License-Identifier: MIT
/// \file
/// CUDA status checks: every runtime call and every launch goes through `check`, and a failure
/// surfaces as `linattn::error` naming the call.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "../../core/error.hpp"

namespace linattn::cuda::detail {

/// Throws linattn::error when `status` is not cudaSuccess.
inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw error(std::string("linattn::cuda: ") + what + " failed: " + cudaGetErrorName(status) + " (" +
                cudaGetErrorString(status) + ")");
}

/// Checks the launch that was just queued (configuration errors surface here; faults inside
/// the kernel surface at the next synchronising call).
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

}  // namespace linattn::cuda::detail
