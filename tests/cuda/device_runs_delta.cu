// SPDX-License-Identifier: MIT
/// \file
/// Device tests: the Delta and GatedDelta instantiations (device_runs.cuh).
#include "device_runs.cuh"

namespace cuda_tests {

LINATTN_TEST_RULE(Delta)
LINATTN_TEST_RULE(GatedDelta)

}  // namespace cuda_tests
