// SPDX-License-Identifier: MIT
/// \file
/// Entry points into a build of the CUDA backend for compute_80 alone (an A100 build, PTX that
/// the driver compiles for the GPU at hand when the test runs): compute80_runs.cu.
#pragma once

#include "device_runs.hpp"

namespace cuda_tests::compute80 {

/// chunkwise_forward<Rule> with bfloat16 inputs, as cuda_tests::run does it in the sm_90 build.
template <class Rule>
outcome chunkwise_bf16(const ref::problem& p, const config& c);

}  // namespace cuda_tests::compute80
