// SPDX-License-Identifier: MIT
/// \file
/// Device tests: the Longhorn instantiations (device_runs.cuh).
#include "device_runs.cuh"

namespace cuda_tests {

LINATTN_TEST_RULE(Longhorn)

}  // namespace cuda_tests
