// SPDX-License-Identifier: MIT
/// \file
/// Backward device tests: the Delta and GatedDelta instantiations (backward_runs.cuh).
#include "backward_runs.cuh"

namespace cuda_tests {

LINATTN_TEST_BACKWARD_RULE(Delta)
LINATTN_TEST_BACKWARD_RULE(GatedDelta)

}  // namespace cuda_tests
