// SPDX-License-Identifier: MIT
/// \file
/// `linattn::cuda::chunkwise_backward<Rule>`: the gradients of chunkwise_forward on the GPU,
/// the CPU backward's semantics and API (forms/chunkwise_backward.hpp) on device memory, in
/// four passes over chunks of 32 tokens in three launches (docs/backward.md#cuda):
///   1. chunk_wy        (delta family) the WY products of every chunk       parallel over chunks
///   2. chunk_states    the chunk-start states, recomputed                  sequential over chunks
///   3. chunk_state_grads  the gradients of the chunk-end states            sequential, in reverse
///      (2 and 3 side by side in one launch: chunk_state_passes; for bf16 inputs and scalar
///      gates state_passes_mma, the states in registers)
///   4. chunk_gradients dq, dk, dv, dg, dbeta of every chunk                parallel over chunks
/// Per-key decays (VectorDecay, KDA) run their own pass 1 (chunk_decayed_rows: the decayed key
/// and query rows the state passes read; KDA also chunk_wy_per_key) and pass 4, which take the
/// chunk's per-key decays element by element, and one more launch that sums dq and dk over the
/// value heads of each q/k head (kernels/backward/chunk_gradients_per_key.cuh).
/// The products are tensor-core products of fp32 tiles (three TF32 products per step for float
/// inputs, one for 16-bit inputs), except for bf16 inputs, whose state passes (scalar and
/// per-key decays) and scalar-gate products with a chunk state take bf16 operands (mma.sync);
/// the gradients are written in the input type, the state gradient in fp32. No atomics: the same
/// call gives the same bits every time.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <type_traits>
#include <utility>

#include "../core/backward.hpp"
#include "../core/family.hpp"
#include "../core/tensor_view.hpp"
#include "host/backward_plan.cuh"
#include "host/call_setup.cuh"
#include "host/launch.cuh"
#include "host/qk_normalization.cuh"
#include "host/supported_rule.cuh"
#include "kernels/backward/chunk_decayed_rows.cuh"
#include "kernels/backward/chunk_gradients.cuh"
#include "kernels/backward/chunk_gradients_per_key.cuh"
#include "kernels/backward/chunk_state_passes.cuh"
#include "kernels/backward/chunk_wy.cuh"
#include "kernels/backward/state_passes_mma.cuh"
#include "tile/dims.cuh"

namespace linattn::cuda {

namespace detail {

/// Blocks of the fp32 state passes (chunk_state_passes_kernel) that one multiprocessor holds at
/// once, at each of state_pass_widths (backward_state_columns).
template <class Rule, class E>
std::array<int, 3> state_pass_residency(index_t K, index_t V) {
  constexpr bool per_key = Rule::decay == decay_kind::vector;
  std::array<int, 3> blocks{};
  with_dims(K, V, [&](auto k, auto) {
    constexpr int Kc = decltype(k)::value;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((blocks[I] = resident_blocks<chunk_state_passes_storage<Kc, state_pass_widths[I], per_key>>(
            chunk_state_passes_kernel<Rule, E, Kc, state_pass_widths[I]>, "chunk_state_passes_kernel")),
       ...);
    }(std::make_index_sequence<state_pass_widths.size()>{});
  });
  return blocks;
}

}  // namespace detail

/// Same inputs, gradient aggregate, layouts and options as linattn::chunkwise_backward, on
/// device memory, queued on `stream`: writes dL/d(every input) for
/// L = <grad_out, out> + <grad_final_state, final state>, and dL/d(initial state) into
/// options::grad_initial_state when given. options::cu_seqlens may live in host or device
/// memory (read on the host, which synchronises); options::chunk_size is accepted as on the
/// CPU and does not change the result (the kernels use chunks of 32). Workspace from the
/// library's pool: 8 K V bytes per 32 tokens and value head (4 K V for bf16 inputs with scalar or
/// no gates, whose states are kept as bf16), plus 8 (K + V) bytes per token and value head for
/// the delta rules (4 K + 8 V for bf16 inputs; and 4 for beta) and 8 K for per-key decays (KDA: 12 K, 10 K for
/// bf16; and 4 K per 32 tokens and value head). Throws linattn::error before
/// anything is queued when an argument is invalid.
template <rule Rule, class G>
void chunkwise_backward(const std::type_identity_t<typename Rule::template inputs<std::remove_const_t<G>>>& in,
                        tensor_view<G, 4> grad_out,
                        const std::type_identity_t<gradients_t<Rule, std::remove_const_t<G>>>& grads,
                        const backward_options<float>& opt = {}, cudaStream_t stream = nullptr) {
  using E = std::remove_const_t<G>;
  static_assert(has_gradients<Rule>, "linattn::cuda::chunkwise_backward: this rule has no backward pass (no Rule::gradients<T>)");
  detail::require_supported<Rule, E>();
  const tensor_view<const E, 4> dout = grad_out;
  const detail::host_seqlens cu(opt.cu_seqlens);
  const detail::problem p = detail::validate_backward<Rule, E>(in, dout, grads, opt, cu);
  constexpr bool corrects = detail::corrects<Rule>, per_key = Rule::decay == decay_kind::vector;
  constexpr bool register_states = detail::register_state_passes<Rule, E>;
  std::array<int, 3> residency{};  // the fp32 state passes' blocks per multiprocessor (their column choice)
  if constexpr (!register_states) residency = detail::state_pass_residency<Rule, E>(p.K, p.V);
  const detail::backward_plan<detail::workspace_state_t<Rule, E>, detail::workspace_row_t<Rule, E>> plan(
      p, corrects, per_key, register_states, detail::multiprocessors(), residency);
  detail::scratch ws(plan.workspace.bytes, stream);
  const detail::normalized_qk<typename Rule::template inputs<E>> qk(in, opt.normalize_qk, stream);
  detail::backward_args<Rule, E> args(qk.inputs(), dout, grads, opt.initial_state, opt.grad_final_state, opt.grad_initial_state, p);
  plan.bind(args, ws, p, stream);
  if (p.N == 0) return;
  detail::with_dims(p.K, p.V, [&](auto k, auto v) {
    constexpr int K = decltype(k)::value, V = decltype(v)::value;
    using detail::launch;
    if (plan.n_chunks > 0) {  // pass 1 (per-key decays: their decayed rows first)
      if constexpr (per_key)
        launch<detail::chunk_decayed_rows_storage<K>>(detail::chunk_decayed_rows_kernel<Rule, E, K>, plan.chunk_grid, args,
                                                      stream, "chunk_decayed_rows_kernel");
      if constexpr (corrects && per_key)
        launch<detail::chunk_wy_per_key_storage<E, K, V>>(detail::chunk_wy_per_key_kernel<Rule, E, K, V>,
                                                          plan.chunk_grid, args, stream, "chunk_wy_per_key_kernel");
      else if constexpr (corrects)
        launch<detail::chunk_wy_storage<E, K, V>>(detail::chunk_wy_kernel<Rule, E, K, V>, plan.chunk_grid, args, stream,
                                               "chunk_wy_kernel");
    }
    if constexpr (register_states) {
      const auto state_passes = [&](auto groups) {
        constexpr int Groups = decltype(groups)::value, Split = detail::state_pass_split(Groups);
        if constexpr (16 * Groups <= V)  // backward_state_groups picks no wider block
          launch<detail::state_passes_mma_storage<Rule, E, K, Groups, Split>>(
              detail::chunk_state_passes_mma_kernel<Rule, E, K, V, Groups, Split>, plan.state_grid, args, stream,
              "chunk_state_passes_mma_kernel");
      };
      detail::with_constant<1, 2, 4, 8>(plan.state_groups, state_passes);
    } else {
      const auto state_passes = [&](auto columns) {
        constexpr int BV = decltype(columns)::value;
        launch<detail::chunk_state_passes_storage<K, BV, per_key>>(detail::chunk_state_passes_kernel<Rule, E, K, BV>,
                                                                   plan.state_grid, args, stream, "chunk_state_passes_kernel");
      };
      detail::with_constant<16, 32, 64>(plan.state_columns, state_passes);
    }
    if (plan.n_chunks == 0) return;  // pass 4
    if constexpr (per_key) {
      launch<detail::chunk_gradients_per_key_storage<K, V, corrects>>(
          detail::chunk_gradients_per_key_kernel<Rule, E, K, V>, plan.chunk_grid, args, stream,
          "chunk_gradients_per_key_kernel");
      detail::group_sum_kernel<Rule, E, K><<<plan.group_sum_grid, 256, 0, stream>>>(args, plan.qk_rows);
      detail::check_launch("group_sum_kernel");
    } else {
      launch<detail::chunk_gradients_storage<E, K, V>>(detail::chunk_gradients_kernel<Rule, E, K, V>, plan.gradient_grid,
                                                    args, stream, "chunk_gradients_kernel");
    }
  });
  if (opt.normalize_qk) detail::chain_qk_normalization(in, grads, stream);
}

}  // namespace linattn::cuda
