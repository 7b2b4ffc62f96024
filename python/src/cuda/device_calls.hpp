// SPDX-License-Identifier: MIT
/// \file
/// The CUDA calls of a rule behind plain C++ declarations: device_calls.cuh defines them with
/// linattn::cuda and rules/<rule>.cu (nvcc) instantiates them; module.cpp (the host compiler,
/// with nanobind) calls them. So nanobind never meets nvcc and the kernels never meet Python's
/// headers. E, the element type of q, k, v, out and their gradients: float, __nv_bfloat16 or
/// __half (the 16-bit ones with g, beta and their gradients in E or in float: the rules'
/// coefficient views); states are float.
#pragma once

#include <linattn/core/backward.hpp>
#include <linattn/core/options.hpp>
#include <linattn/core/tensor_view.hpp>
#include <linattn/cuda/element_types.hpp>

#include <cstddef>
#include <cstdint>

namespace linattn::python {

/// chunkwise (`chunk`) or recurrent forward of Rule on device views, queued on `stream` (a
/// cudaStream_t as an integer). Throws linattn::error on bad arguments or CUDA failures.
template <class Rule, class E>
void cuda_forward(bool chunk, const typename Rule::template inputs<E>& in, tensor_view<E, 4> out,
                  const options<float>& opt, std::uintptr_t stream);

/// chunkwise_backward of Rule on device views, queued on `stream`.
template <class Rule, class E>
void cuda_backward(const typename Rule::template inputs<E>& in, tensor_view<const E, 4> grad_out,
                   const gradients_t<Rule, E>& grads, const backward_options<float>& opt, std::uintptr_t stream);

/// A workspace allocator in plain C++ terms (streams as integers), for the module to install
/// without CUDA's headers: see linattn::cuda::workspace_allocator.
struct workspace_hook {
  void* (*allocate)(std::size_t bytes, std::uintptr_t stream, void* context) = nullptr;
  void (*release)(void* p, std::size_t bytes, std::uintptr_t stream, void* context) = nullptr;
  void* context = nullptr;
};

/// Makes every later linattn::cuda call take its workspace from `hook` (workspace.cu).
void use_workspace_allocator(const workspace_hook& hook);

}  // namespace linattn::python
