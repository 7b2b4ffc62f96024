// SPDX-License-Identifier: MIT
/// \file
/// The definitions of cuda_forward and cuda_backward (device_calls.hpp), for nvcc only: each
/// rules/<rule>.cu instantiates them for its rule.
#pragma once

#include <linattn/cuda.cuh>

#include "device_calls.hpp"

namespace linattn::python {

template <class Rule, class E>
void cuda_forward(bool chunk, const typename Rule::template inputs<E>& in, tensor_view<E, 4> out,
                  const options<float>& opt, std::uintptr_t stream) {
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  if (chunk) cuda::chunkwise_forward<Rule>(in, out, opt, s);
  else cuda::recurrent_forward<Rule>(in, out, opt, s);
}

template <class Rule, class E>
void cuda_backward(const typename Rule::template inputs<E>& in, tensor_view<const E, 4> grad_out,
                   const gradients_t<Rule, E>& grads, const backward_options<float>& opt, std::uintptr_t stream) {
  cuda::chunkwise_backward<Rule>(in, grad_out, grads, opt, reinterpret_cast<cudaStream_t>(stream));
}

/// The explicit instantiations of one rule and element type, and of one rule (rules/<rule>.cu):
/// forward and backward.
#define LINATTN_PY_CUDA_FORWARD_TYPE(R, E)                                                               \
  template void cuda_forward<R, E>(bool, const R::inputs<E>&, tensor_view<E, 4>, const options<float>&,  \
                                   std::uintptr_t);
#define LINATTN_PY_CUDA_RULE_TYPE(R, E)                                                                    \
  LINATTN_PY_CUDA_FORWARD_TYPE(R, E)                                                                       \
  template void cuda_backward<R, E>(const R::inputs<E>&, tensor_view<const E, 4>, const gradients_t<R, E>&, \
                                    const backward_options<float>&, std::uintptr_t);
#define LINATTN_PY_CUDA_EACH_TYPE(M, R) M(R, float) M(R, __nv_bfloat16) M(R, __half)
#define LINATTN_PY_CUDA_RULE(R) LINATTN_PY_CUDA_EACH_TYPE(LINATTN_PY_CUDA_RULE_TYPE, R)

}  // namespace linattn::python
