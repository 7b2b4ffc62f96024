// SPDX-License-Identifier: MIT
/// \file
/// `linattn::cuda::recurrent_forward<Rule>` and `linattn::cuda::decode_step<Rule>`: the
/// token-by-token recurrence on the GPU (one launch; the state is read once and written once).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "../core/family.hpp"
#include "../core/options.hpp"
#include "../core/tensor_view.hpp"
#include "host/call_setup.cuh"
#include "host/supported_rule.cuh"
#include "kernels/token_recurrence.cuh"
#include "tile/dims.cuh"

namespace linattn::cuda {

namespace detail {

template <class Rule, class E>
void launch_tokens(const token_args<Rule, E>& args, const problem& p, cudaStream_t stream) {
  if (p.N == 0) return;
  with_dims(p.K, p.V, [&](auto k, auto) {
    constexpr int K = decltype(k)::value;
    token_kernel<Rule, E, K><<<dim3(unsigned(p.N), unsigned(p.HV), unsigned(p.V / 32)), 32 * token_block_warps, 0,
                               stream>>>(args);
    check_launch("token_kernel");
  });
}

}  // namespace detail

/// Same inputs, layouts and options as linattn::recurrent_forward, on device memory, queued on
/// `stream`. options::cu_seqlens may live in host or device memory (read on the host).
template <rule Rule, class T>
void recurrent_forward(const std::type_identity_t<typename Rule::template inputs<std::remove_const_t<T>>>& in,
                       tensor_view<T, 4> out, const options<float>& opt = {}, cudaStream_t stream = nullptr) {
  using E = std::remove_const_t<T>;
  detail::require_supported<Rule, E>();
  const detail::host_seqlens cu(opt.cu_seqlens);
  const auto p = detail::validate<Rule, E>(detail::form::recurrent, in, out, opt, nullptr, cu);
  detail::token_args<Rule, E> args(in, out, opt.initial_state, opt.final_state, p);
  std::vector<detail::span> seqs;
  if (p.cu.given()) seqs = detail::sequences(p);
  detail::scratch ws(detail::scratch::round(seqs.size() * sizeof(detail::span)), stream);
  args.seqs = detail::upload(ws, seqs, stream);
  detail::launch_tokens(args, p, stream);
}

/// One step per sequence on device memory: inputs `[B, T, ...]` (usually T = 1), out
/// `[B, T, HV, V]`, `state` `[B, HV, K, V]` (fp32) read and updated in place, queued on
/// `stream`. No host synchronisation.
template <rule Rule, class T>
void decode_step(const std::type_identity_t<typename Rule::template inputs<std::remove_const_t<T>>>& in,
                 tensor_view<T, 4> out, tensor_view<float, 4> state, const options<float>& opt = {},
                 cudaStream_t stream = nullptr) {
  using E = std::remove_const_t<T>;
  detail::require_supported<Rule, E>();
  const detail::host_seqlens cu(opt.cu_seqlens);
  const auto p = detail::validate<Rule, E>(detail::form::decode, in, out, opt, &state, cu);
  const detail::token_args<Rule, E> args(in, out, state, state, p);
  detail::launch_tokens(args, p, stream);
}

}  // namespace linattn::cuda
