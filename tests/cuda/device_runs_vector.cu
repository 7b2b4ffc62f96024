// SPDX-License-Identifier: MIT
/// \file
/// Device tests: the instantiations of the per-key decay rules VectorDecay and KDA
/// (device_runs.cuh).
#include "device_runs.cuh"

namespace cuda_tests {

LINATTN_TEST_RULE(VectorDecay)
LINATTN_TEST_RULE(KDA)

}  // namespace cuda_tests
