// SPDX-License-Identifier: MIT
/// \file
/// The definition of cuda_forward (forward.hpp), for nvcc only: each rules/<rule>.cu
/// instantiates it for its rule.
#pragma once

#include <linattn/cuda.cuh>

#include "forward.hpp"

namespace linattn::python {

template <class Rule>
void cuda_forward(bool chunk, const typename Rule::template inputs<float>& in, tensor_view<float, 4> out,
                  const options<float>& opt, std::uintptr_t stream) {
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  if (chunk) cuda::chunkwise_forward<Rule>(in, out, opt, s);
  else cuda::recurrent_forward<Rule>(in, out, opt, s);
}

}  // namespace linattn::python
