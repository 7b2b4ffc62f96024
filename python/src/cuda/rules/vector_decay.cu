// SPDX-License-Identifier: MIT
// One translation unit per rule: its CUDA forward kernels (K, V in {64, 128}; per-key decays have
// no CUDA backward, so the module binds forward_vector_decay only).
#include "../device_calls.cuh"

namespace linattn::python {
LINATTN_PY_CUDA_RULE(VectorDecay)
}  // namespace linattn::python
