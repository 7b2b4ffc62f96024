// SPDX-License-Identifier: MIT
/// \file
/// The CUDA calls of a rule behind plain C++ declarations: device_calls.cuh defines them with
/// linattn::cuda and rules/<rule>.cu (nvcc) instantiates them; module.cpp (the host compiler,
/// with nanobind) calls them. So nanobind never meets nvcc and the kernels never meet Python's
/// headers.
#pragma once

#include <linattn/core/backward.hpp>
#include <linattn/core/options.hpp>
#include <linattn/core/tensor_view.hpp>

#include <cstdint>

namespace linattn::python {

/// chunkwise (`chunk`) or recurrent forward of Rule on float32 device views, queued on `stream`
/// (a cudaStream_t as an integer). Throws linattn::error on bad arguments or CUDA failures.
template <class Rule>
void cuda_forward(bool chunk, const typename Rule::template inputs<float>& in, tensor_view<float, 4> out,
                  const options<float>& opt, std::uintptr_t stream);

/// chunkwise_backward of Rule on float32 device views, queued on `stream`.
template <class Rule>
void cuda_backward(const typename Rule::template inputs<float>& in, tensor_view<const float, 4> grad_out,
                   const gradients_t<Rule, float>& grads, const backward_options<float>& opt, std::uintptr_t stream);

}  // namespace linattn::python
