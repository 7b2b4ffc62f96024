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
#include "host/plan.cuh"
#include "host/qk_normalization.cuh"
#include "host/supported_rule.cuh"
#include "kernels/token_recurrence.cuh"
#include "tile/dims.cuh"

namespace linattn::cuda {

namespace detail {

/// Plans the call, takes its workspace and launches the token kernel.
template <class Rule, class E>
void run_tokens(token_args<Rule, E> args, const problem& p, cudaStream_t stream) {
  const token_plan plan(p, multiprocessors(), Rule::decay == decay_kind::vector);
  scratch ws(plan.workspace.bytes, stream);
  plan.bind(args, ws, stream);
  if (p.N == 0) return;
  with_dims(p.K, p.V, [&](auto k, auto) {
    constexpr int K = decltype(k)::value;
    if (plan.warps == 8) token_kernel<Rule, E, K, 8><<<plan.grid, 32 * 8, 0, stream>>>(args);
    else if (plan.slabs_adjacent) token_kernel<Rule, E, K, 4, true><<<plan.grid, 32 * 4, 0, stream>>>(args);
    else token_kernel<Rule, E, K, 4><<<plan.grid, 32 * 4, 0, stream>>>(args);
    check_launch("token_kernel");
  });
}

}  // namespace detail

/// Same inputs, layouts and options as linattn::recurrent_forward, on device memory, queued on
/// `stream`. options::cu_seqlens may live in host or device memory (read on the host), and so
/// may options::state_indices; options::checkpoints (device memory) as on the CPU.
template <rule Rule, class T>
void recurrent_forward(const std::type_identity_t<typename Rule::template inputs<std::remove_const_t<T>>>& in,
                       tensor_view<T, 4> out, const options<float>& opt = {}, cudaStream_t stream = nullptr) {
  using E = std::remove_const_t<T>;
  detail::require_supported<Rule, E>();
  const detail::host_seqlens cu(opt.cu_seqlens);
  const auto p = detail::validate<Rule, E>(detail::form::recurrent, in, out, opt, nullptr, cu);
  const detail::normalized_qk<typename Rule::template inputs<E>> qk(in, opt.normalize_qk, stream);
  detail::token_args<Rule, E> args(qk.inputs(), out, opt.initial_state, opt.final_state, p);
  detail::with_checkpoints(args, opt, p);
  detail::run_tokens(args, p, stream);
}

/// One step per sequence on device memory: inputs `[B, T, ...]` (usually T = 1), out
/// `[B, T, HV, V]`, `state` `[B, HV, K, V]` (fp32) read and updated in place, queued on
/// `stream`. With options::state_indices (N int32/int64 entries) `state` is a pool
/// `[P, HV, K, V]` and sequence n updates slot state_indices[n] (negative: from zero, not
/// written). The indices are validated on the host and carried in the kernel arguments (up to
/// 64 sequences) or uploaded with the call's tables: host memory costs no synchronisation;
/// device memory is copied to the host first (one).
template <rule Rule, class T>
void decode_step(const std::type_identity_t<typename Rule::template inputs<std::remove_const_t<T>>>& in,
                 tensor_view<T, 4> out, tensor_view<float, 4> state, const options<float>& opt = {},
                 cudaStream_t stream = nullptr) {
  using E = std::remove_const_t<T>;
  detail::require_supported<Rule, E>();
  const detail::host_seqlens cu(opt.cu_seqlens);
  const auto p = detail::validate<Rule, E>(detail::form::decode, in, out, opt, &state, cu);
  const detail::normalized_qk<typename Rule::template inputs<E>> qk(in, opt.normalize_qk, stream);
  detail::token_args<Rule, E> args(qk.inputs(), out, state, state, p);
  detail::with_checkpoints(args, opt, p);
  detail::run_tokens(args, p, stream);
}

}  // namespace linattn::cuda
