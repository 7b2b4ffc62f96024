// SPDX-License-Identifier: MIT
// One translation unit per rule: its CUDA forward kernels (K, V in {64, 128}).
#include "../forward.cuh"

namespace linattn::python {
template void cuda_forward<Longhorn>(bool, const Longhorn::inputs<float>&, tensor_view<float, 4>, const options<float>&,
                               std::uintptr_t);
}  // namespace linattn::python
