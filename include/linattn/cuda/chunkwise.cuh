// SPDX-License-Identifier: MIT
/// \file
/// `linattn::cuda::chunkwise_forward<Rule>`: the chunkwise form on the GPU, chunk 64, in two
/// launches: the chunk-local pass (parallel over chunks and value heads) and the state pass
/// (parallel over sequences, value heads and 16- or 32-column blocks of V; sequential over
/// chunks).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "../core/family.hpp"
#include "../core/options.hpp"
#include "../core/tensor_view.hpp"
#include "call_setup.cuh"
#include "chunk_local_kernel.cuh"
#include "chunk_state_kernel.cuh"
#include "dims.cuh"
#include "supported_rule.cuh"

namespace linattn::cuda {

namespace detail {

/// Multiprocessors of the current device.
inline int multiprocessors() {
  int device = 0, count = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  return count;
}

template <class Rule, class E, int K, int BV>
void launch_state(const chunk_args<Rule, E>& args, const problem& p, cudaStream_t stream) {
  using S = chunk_state_layout<Rule, E, K, BV>;
  auto* kernel = chunk_state_kernel<Rule, E, K, BV>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::bytes),
        "cudaFuncSetAttribute(chunk_state_kernel)");
  kernel<<<dim3(unsigned(p.V / BV), unsigned(p.HV), unsigned(p.N)), S::threads, S::bytes, stream>>>(args);
  check_launch("chunk_state_kernel");
}

}  // namespace detail

/// Same inputs, layouts and options as linattn::chunkwise_forward, on device memory, queued
/// on `stream`. options::cu_seqlens may live in host or device memory (it is read on the host,
/// which synchronises); options::chunk_size must be 64. Throws linattn::error before anything
/// is queued when an argument is invalid.
template <rule Rule, class T>
void chunkwise_forward(const std::type_identity_t<typename Rule::template inputs<std::remove_const_t<T>>>& in,
                       tensor_view<T, 4> out, const options<float>& opt = {}, cudaStream_t stream = nullptr) {
  using E = std::remove_const_t<T>;
  detail::require_supported<Rule, E>();
  const detail::host_seqlens cu(opt.cu_seqlens);
  const auto p = detail::validate<Rule, E>(detail::form::chunkwise, in, out, opt, nullptr, cu);

  detail::chunk_args<Rule, E> args(in, out, opt.initial_state, opt.final_state, p);
  const std::size_t tokens = std::size_t(p.B * p.T * p.HV);
  std::vector<detail::span> seqs, chunks;
  if (p.cu.given()) {
    seqs = detail::sequences(p);
    chunks = detail::chunks(seqs);
  }
  const std::size_t n_chunks = p.cu.given() ? chunks.size() : std::size_t(p.B * ((p.T + detail::chunk - 1) / detail::chunk));
  using detail::scratch;
  scratch ws(scratch::round(seqs.size() * sizeof(detail::span)) + scratch::round(chunks.size() * sizeof(detail::span)) +
                 scratch::round(tokens * p.K * sizeof(E)) + scratch::round(tokens * p.V * sizeof(E)) +
                 scratch::round(tokens * detail::chunk * sizeof(E)) + scratch::round(tokens * sizeof(float)),
             stream);
  args.seqs = detail::upload(ws, seqs, stream);
  args.chunks = detail::upload(ws, chunks, stream);
  args.w = view(ws.take<E>(tokens * p.K), p.B, p.T, p.HV, p.K);
  args.u = view(ws.take<E>(tokens * p.V), p.B, p.T, p.HV, p.V);
  args.scores = view(ws.take<E>(tokens * detail::chunk), p.B, p.T, p.HV, index_t(detail::chunk));
  args.gate_cumsum = view(ws.take<float>(tokens), p.B, p.T, p.HV);

  detail::with_dims(p.K, p.V, [&](auto k, auto v) {
    constexpr int K = decltype(k)::value, V = decltype(v)::value;
    if (n_chunks > 0) {
      using L = detail::chunk_local_layout<Rule, E, K, V>;
      auto* kernel = detail::chunk_local_kernel<Rule, E, K, V>;
      detail::check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::bytes),
                    "cudaFuncSetAttribute(chunk_local_kernel)");
      kernel<<<dim3(unsigned(n_chunks), unsigned(p.HV)), L::threads, L::bytes, stream>>>(args);
      detail::check_launch("chunk_local_kernel");
    }
    // 32 value columns per block, or 16 when that leaves SMs idle (few sequences x heads)
    if (p.N * p.HV * (p.V / 32) >= detail::multiprocessors()) detail::launch_state<Rule, E, K, 32>(args, p, stream);
    else detail::launch_state<Rule, E, K, 16>(args, p, stream);
  });
}

}  // namespace linattn::cuda
