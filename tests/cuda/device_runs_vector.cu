// SPDX-License-Identifier: MIT
/// \file
/// Device tests: the per-key decay rules VectorDecay and KDA, which run on the token kernel
/// (recurrent_forward, decode_step, verify_drafts) only (device_runs.cuh).
#include "device_runs.cuh"

namespace cuda_tests {

LINATTN_TEST_TOKEN_RULE(VectorDecay)
LINATTN_TEST_TOKEN_RULE(KDA)

}  // namespace cuda_tests
