// SPDX-License-Identifier: MIT
/// \file
/// `linattn::cuda::chunkwise_forward<Rule>`: the chunkwise form on the GPU, chunk 64: the
/// chunk-local pass (parallel over chunks and value heads), then the state pass (parallel over
/// sequences, value heads and column blocks of V; sequential over chunks), which also forms
/// the output when the call has enough sequences x heads to fill the GPU. When it has not
/// (16-bit inputs), the state pass only carries the state and stores it per chunk, and a third
/// pass, parallel over chunks, forms the output.
/// 16-bit inputs take the mma.sync kernels (chunk_local_mma_kernel, chunk_state_mma_kernel or
/// chunk_state_rows_kernel + chunk_output_mma_kernel), fp32 inputs the WMMA 3xTF32 ones
/// (chunk_local_kernel, chunk_state_kernel).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "../core/family.hpp"
#include "../core/options.hpp"
#include "../core/tensor_view.hpp"
#include "call_setup.cuh"
#include "chunk_local_kernel.cuh"
#include "chunk_local_mma_kernel.cuh"
#include "chunk_output_mma_kernel.cuh"
#include "chunk_state_kernel.cuh"
#include "chunk_state_mma_kernel.cuh"
#include "chunk_state_rows_kernel.cuh"
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

template <class Rule, class E, int K, int Groups, int Split>
void launch_state_mma(const chunk_args<Rule, E>& args, const problem& p, cudaStream_t stream) {
  using S = chunk_state_mma_layout<Rule, E, K, Groups, Split>;
  auto* kernel = chunk_state_mma_kernel<Rule, E, K, Groups, Split>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::bytes),
        "cudaFuncSetAttribute(chunk_state_mma_kernel)");
  kernel<<<dim3(unsigned(p.V / S::BV), unsigned(p.HV), unsigned(p.N)), S::threads, S::bytes, stream>>>(args);
  check_launch("chunk_state_mma_kernel");
}

/// Value columns per block of the state pass that leaves the output to a pass of its own
/// (16-bit inputs): 16 or 32, the fewer with which the blocks fit on the multiprocessors at
/// once, or 0 when 32-column blocks would not: then the fused state pass runs (at 64 columns
/// the separate output pass's extra state traffic costs more than it saves; bench/cuda/NOTES.md).
inline int split_state_columns(const problem& p, index_t sms) {
  for (int bv : {16, 32})
    if (p.N * p.HV * (p.V / bv) <= sms) return bv;
  return 0;
}

/// The state pass without the output (chunk_state_rows_kernel, `BV` columns per block), then
/// the output pass (64 columns per block).
template <class Rule, class E, int K, int V, int BV>
void launch_split_passes(const chunk_args<Rule, E>& args, std::size_t n_chunks, const problem& p, cudaStream_t stream) {
  if constexpr (V % BV == 0) {
    using S = chunk_state_rows_layout<Rule, E, K, BV>;
    auto* state_kernel = chunk_state_rows_kernel<Rule, E, K, BV>;
    check(cudaFuncSetAttribute(state_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::bytes),
          "cudaFuncSetAttribute(chunk_state_rows_kernel)");
    state_kernel<<<dim3(unsigned(V / BV), unsigned(p.HV), unsigned(p.N)), S::threads, S::bytes, stream>>>(args);
    check_launch("chunk_state_rows_kernel");
    if (n_chunks == 0) return;
    using O = chunk_output_layout<Rule, E, K, 64>;
    auto* out_kernel = chunk_output_mma_kernel<Rule, E, K, 64>;
    check(cudaFuncSetAttribute(out_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, O::bytes),
          "cudaFuncSetAttribute(chunk_output_mma_kernel)");
    out_kernel<<<dim3(unsigned(n_chunks * (V / 64)), unsigned(p.HV)), O::threads, O::bytes, stream>>>(args);
    check_launch("chunk_output_mma_kernel");
  }
}

/// The chunk-local pass, one block per (chunk, value head): mma.sync tiles for 16-bit inputs,
/// WMMA with 3xTF32 products for fp32.
template <class Rule, class E, int K, int V>
void launch_local_pass(const chunk_args<Rule, E>& args, std::size_t n_chunks, const problem& p, cudaStream_t stream) {
  const auto launch = [&](auto* kernel, int threads, int bytes) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
          "cudaFuncSetAttribute(chunk-local kernel)");
    kernel<<<dim3(unsigned(n_chunks), unsigned(p.HV)), unsigned(threads), unsigned(bytes), stream>>>(args);
    check_launch("chunk-local kernel");
  };
  if constexpr (sizeof(E) == 2) {
    using L = chunk_local_mma_layout<Rule, E, K, V>;
    launch(chunk_local_mma_kernel<Rule, E, K, V>, L::threads, L::bytes);
  } else {
    using L = chunk_local_layout<Rule, E, K, V>;
    launch(chunk_local_kernel<Rule, E, K, V>, L::threads, L::bytes);
  }
}

/// The state pass fused with the output. 16-bit inputs: 16 value columns per warp group,
/// state in registers. One block fits per multiprocessor, so the shape picks how wide a block
/// is: up to 4 groups per multiprocessor take 4 groups of 2 warps (splitting each group's key
/// columns), more take all value columns in one block of one-warp groups: as few blocks as fill
/// the multiprocessors, each reading the chunk's Q, K, W tiles once. (Fewer sequences x heads
/// take chunk_state_rows_kernel instead.) fp32 inputs: the shared-memory state pass with
/// 3xTF32 products.
template <class Rule, class E, int K, int V>
void launch_state_pass(const chunk_args<Rule, E>& args, const problem& p, cudaStream_t stream) {
  const index_t sms = multiprocessors();
  if constexpr (sizeof(E) == 2) {
    const index_t units = p.N * p.HV * (V / 16);  // 16-column groups
    if (units <= 4 * sms) launch_state_mma<Rule, E, K, 4, 2>(args, p, stream);
    else launch_state_mma<Rule, E, K, V / 16, 1>(args, p, stream);
  } else {
    // 32 value columns per block, or 16 when that leaves multiprocessors idle
    if (p.N * p.HV * (V / 32) >= sms) launch_state<Rule, E, K, 32>(args, p, stream);
    else launch_state<Rule, E, K, 16>(args, p, stream);
  }
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
  const int split_bv = sizeof(E) == 2 ? detail::split_state_columns(p, detail::multiprocessors()) : 0;
  const std::size_t state_count = split_bv ? n_chunks * std::size_t(p.K * p.HV * p.V) : 0;
  using detail::scratch;
  scratch ws(scratch::round(seqs.size() * sizeof(detail::span)) + scratch::round(chunks.size() * sizeof(detail::span)) +
                 scratch::round(tokens * p.K * sizeof(E)) + scratch::round(tokens * p.V * sizeof(E)) +
                 scratch::round(tokens * detail::chunk * sizeof(E)) + scratch::round(tokens * sizeof(float)) +
                 scratch::round(state_count * sizeof(E)),
             stream);
  args.seqs = detail::upload(ws, seqs, stream);
  args.chunks = detail::upload(ws, chunks, stream);
  args.w = view(ws.take<E>(tokens * p.K), p.B, p.T, p.HV, p.K);
  args.u = view(ws.take<E>(tokens * p.V), p.B, p.T, p.HV, p.V);
  args.scores = view(ws.take<E>(tokens * detail::chunk), p.B, p.T, p.HV, index_t(detail::chunk));
  args.gate_cumsum = view(ws.take<float>(tokens), p.B, p.T, p.HV);
  if (split_bv) args.states = view(ws.take<E>(state_count), index_t(n_chunks), p.K, p.HV, p.V);

  detail::with_dims(p.K, p.V, [&](auto k, auto v) {
    constexpr int K = decltype(k)::value, V = decltype(v)::value;
    if (n_chunks > 0) detail::launch_local_pass<Rule, E, K, V>(args, n_chunks, p, stream);
    if constexpr (sizeof(E) == 2) {
      switch (split_bv) {
        case 16: return detail::launch_split_passes<Rule, E, K, V, 16>(args, n_chunks, p, stream);
        case 32: return detail::launch_split_passes<Rule, E, K, V, 32>(args, n_chunks, p, stream);
        default: break;
      }
    }
    detail::launch_state_pass<Rule, E, K, V>(args, p, stream);
  });
}

}  // namespace linattn::cuda
