// SPDX-License-Identifier: MIT
// One translation unit per rule: its CUDA forward and backward kernels (K, V in {64, 128}).
#include "../device_calls.cuh"

namespace linattn::python {
LINATTN_PY_CUDA_RULE(Longhorn)
}  // namespace linattn::python
