// SPDX-License-Identifier: MIT
/// \file
/// The CUDA forward of a rule behind a plain C++ declaration: forward.cuh defines it with
/// linattn::cuda and rules/<rule>.cu (nvcc) instantiates it; module.cpp (the host compiler, with nanobind) calls it. So
/// nanobind never meets nvcc and the kernels never meet Python's headers.
#pragma once

#include <linattn/core/options.hpp>
#include <linattn/core/tensor_view.hpp>

#include <cstdint>

namespace linattn::python {

/// chunkwise (`chunk`) or recurrent forward of Rule on float32 device views, queued on `stream`
/// (a cudaStream_t as an integer). Throws linattn::error on bad arguments or CUDA failures.
template <class Rule>
void cuda_forward(bool chunk, const typename Rule::template inputs<float>& in, tensor_view<float, 4> out,
                  const options<float>& opt, std::uintptr_t stream);

}  // namespace linattn::python
