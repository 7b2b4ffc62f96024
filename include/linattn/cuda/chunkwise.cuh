// SPDX-License-Identifier: MIT
/// \file
/// `linattn::cuda::chunkwise_forward<Rule>`: the chunkwise form on the GPU, chunk 64, in two
/// launches: the chunk-local pass (parallel over chunks and value heads) and the state pass
/// (parallel over sequences, value heads and column blocks of V; sequential over chunks).
/// 16-bit inputs take the mma.sync kernels (chunk_local_mma_kernel, then
/// chunk_state_specialized_kernel for few sequences x heads, chunk_state_mma_kernel for more),
/// fp32 inputs the WMMA 3xTF32 ones (chunk_local_wmma_kernel, chunk_state_wmma_kernel).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "../core/family.hpp"
#include "../core/options.hpp"
#include "../core/tensor_view.hpp"
#include "host/call_setup.cuh"
#include "host/supported_rule.cuh"
#include "kernels/chunk_local_mma.cuh"
#include "kernels/chunk_local_wmma.cuh"
#include "kernels/chunk_state_mma.cuh"
#include "kernels/chunk_state_specialized.cuh"
#include "kernels/chunk_state_wmma.cuh"
#include "tile/dims.cuh"

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
  using S = chunk_state_wmma_storage<E, K, BV>;
  auto* kernel = chunk_state_wmma_kernel<Rule, E, K, BV>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(S))),
        "cudaFuncSetAttribute(chunk_state_wmma_kernel)");
  kernel<<<dim3(unsigned(p.V / BV), unsigned(p.HV), unsigned(p.N)), S::threads, sizeof(S), stream>>>(args);
  check_launch("chunk_state_wmma_kernel");
}

template <class Rule, class E, int K, int Groups, int Split>
void launch_state_mma(const chunk_args<Rule, E>& args, const problem& p, cudaStream_t stream) {
  using S = chunk_state_mma_storage<Rule, E, K, Groups, Split>;
  auto* kernel = chunk_state_mma_kernel<Rule, E, K, Groups, Split>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(S))),
        "cudaFuncSetAttribute(chunk_state_mma_kernel)");
  kernel<<<dim3(unsigned(p.V / S::BV), unsigned(p.HV), unsigned(p.N)), S::threads, sizeof(S), stream>>>(args);
  check_launch("chunk_state_mma_kernel");
}

/// Value columns per block of the warp-specialised state pass (16-bit inputs): 16 or 32, the
/// fewer with which the blocks fit on the multiprocessors at once, or 0 when 32-column blocks
/// would not: then the state pass with the output inside runs (bench/cuda/NOTES.md).
inline int specialized_state_columns(const problem& p, index_t sms) {
  for (int bv : {16, 32})
    if (p.N * p.HV * (p.V / bv) <= sms) return bv;
  return 0;
}

template <class Rule, class E, int K, int V, int BV>
void launch_state_specialized(const chunk_args<Rule, E>& args, const problem& p, cudaStream_t stream) {
  static_assert(V % BV == 0, "whole column blocks");
  using S = chunk_state_specialized_storage<Rule, E, K, BV>;
  auto* kernel = chunk_state_specialized_kernel<Rule, E, K, BV>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(S))),
        "cudaFuncSetAttribute(chunk_state_specialized_kernel)");
  kernel<<<dim3(unsigned(V / BV), unsigned(p.HV), unsigned(p.N)), S::threads, sizeof(S), stream>>>(args);
  check_launch("chunk_state_specialized_kernel");
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
    using S = chunk_local_mma_storage<Rule, E, K, V>;
    launch(chunk_local_mma_kernel<Rule, E, K, V>, S::threads, int(sizeof(S)));
  } else {
    using S = chunk_local_wmma_storage<Rule, E, K, V>;
    launch(chunk_local_wmma_kernel<Rule, E, K, V>, S::threads, int(sizeof(S)));
  }
}

/// The state pass. 16-bit inputs: with few sequences x heads (16-column groups <= 2 per
/// multiprocessor) the warp-specialised kernel; otherwise 16 value columns per warp group,
/// state in registers, output formed in the same warps. One block fits per multiprocessor, so
/// the shape picks how wide a block is: up to 4 groups per multiprocessor take 4 groups of 2
/// warps (splitting each group's key columns), more take all value columns in one block of
/// one-warp groups: as few blocks as fill the multiprocessors, each reading the chunk's Q, K,
/// W tiles once. fp32 inputs: the shared-memory state pass with 3xTF32 products.
/// `specialized` = specialized_state_columns(p, sms), as the workspace was laid out for.
template <class Rule, class E, int K, int V>
void launch_state_pass(const chunk_args<Rule, E>& args, const problem& p, index_t sms, int specialized,
                       cudaStream_t stream) {
  if constexpr (sizeof(E) == 2) {
    const index_t units = p.N * p.HV * (V / 16);  // 16-column groups
    switch (specialized) {
      case 16: return launch_state_specialized<Rule, E, K, V, 16>(args, p, stream);
      case 32: return launch_state_specialized<Rule, E, K, V, 32>(args, p, stream);
      default: break;
    }
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
  using detail::scratch;
  // For the warp-specialised state pass, W, the scores and copies of K and Q head-major with
  // padded rows ([B, HV, T, K + pad] etc.): a chunk's rows of one value head are one block,
  // laid out as that pass's shared tiles, which it copies whole (tile/bulk_copy.cuh).
  const index_t sms = detail::multiprocessors();
  const int specialized = sizeof(E) == 2 ? detail::specialized_state_columns(p, sms) : 0;
  const bool whole_tiles = specialized != 0;
  const index_t pad = whole_tiles ? detail::pad<E> : 0, ldw = p.K + pad, lds = detail::chunk + pad;
  const auto workspace_view = [&](E* data, index_t width, index_t ld) {
    if (!whole_tiles) return view(data, p.B, p.T, p.HV, width);
    return tensor_view<E, 4>(data, {p.B, p.T, p.HV, width}, {p.HV * p.T * ld, ld, p.T * ld, 1});
  };
  scratch ws(scratch::round(seqs.size() * sizeof(detail::span)) + scratch::round(chunks.size() * sizeof(detail::span)) +
                 scratch::round(tokens * ldw * sizeof(E)) * (whole_tiles ? 3 : 1) + scratch::round(tokens * p.V * sizeof(E)) +
                 scratch::round(tokens * lds * sizeof(E)) +
                 scratch::round(n_chunks * std::size_t(p.HV) * detail::chunk * sizeof(float)),
             stream);
  args.seqs = detail::upload(ws, seqs, stream);
  args.chunks = detail::upload(ws, chunks, stream);
  args.w = workspace_view(ws.take<E>(tokens * ldw), p.K, ldw);
  args.u = view(ws.take<E>(tokens * p.V), p.B, p.T, p.HV, p.V);
  args.scores = workspace_view(ws.take<E>(tokens * lds), index_t(detail::chunk), lds);
  if (whole_tiles) {
    args.keys = workspace_view(ws.take<E>(tokens * ldw), p.K, ldw);
    args.queries = workspace_view(ws.take<E>(tokens * ldw), p.K, ldw);
  }
  args.gate_cumsum = view(ws.take<float>(n_chunks * p.HV * detail::chunk), index_t(n_chunks), p.HV, index_t(detail::chunk));

  detail::with_dims(p.K, p.V, [&](auto k, auto v) {
    constexpr int K = decltype(k)::value, V = decltype(v)::value;
    if (n_chunks > 0) detail::launch_local_pass<Rule, E, K, V>(args, n_chunks, p, stream);
    detail::launch_state_pass<Rule, E, K, V>(args, p, sms, specialized, stream);
  });
}

}  // namespace linattn::cuda
