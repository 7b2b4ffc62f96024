// SPDX-License-Identifier: MIT
/// \file
/// Backward device tests: the Hebbian, ScalarDecay and Longhorn instantiations (backward_runs.cuh).
#include "backward_runs.cuh"

namespace cuda_tests {

LINATTN_TEST_BACKWARD_RULE(Hebbian)
LINATTN_TEST_BACKWARD_RULE(ScalarDecay)
LINATTN_TEST_BACKWARD_RULE(Longhorn)

}  // namespace cuda_tests
