// SPDX-License-Identifier: MIT
/// \file
/// The definitions of cuda_forward and cuda_backward (device_calls.hpp), for nvcc only: each
/// rules/<rule>.cu instantiates them for its rule.
#pragma once

#include <linattn/cuda.cuh>

#include "device_calls.hpp"

namespace linattn::python {

template <class Rule>
void cuda_forward(bool chunk, const typename Rule::template inputs<float>& in, tensor_view<float, 4> out,
                  const options<float>& opt, std::uintptr_t stream) {
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  if (chunk) cuda::chunkwise_forward<Rule>(in, out, opt, s);
  else cuda::recurrent_forward<Rule>(in, out, opt, s);
}

template <class Rule>
void cuda_backward(const typename Rule::template inputs<float>& in, tensor_view<const float, 4> grad_out,
                   const gradients_t<Rule, float>& grads, const backward_options<float>& opt, std::uintptr_t stream) {
  cuda::chunkwise_backward<Rule>(in, grad_out, grads, opt, reinterpret_cast<cudaStream_t>(stream));
}

/// The explicit instantiations of one rule (rules/<rule>.cu).
#define LINATTN_PY_CUDA_RULE(R)                                                                                    \
  template void cuda_forward<R>(bool, const R::inputs<float>&, tensor_view<float, 4>, const options<float>&,       \
                                std::uintptr_t);                                                                    \
  template void cuda_backward<R>(const R::inputs<float>&, tensor_view<const float, 4>, const gradients_t<R, float>&, \
                                 const backward_options<float>&, std::uintptr_t);

}  // namespace linattn::python
