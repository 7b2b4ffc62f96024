// SPDX-License-Identifier: MIT
/// \file
/// `linattn::cuda::chunkwise_forward<Rule>`: the chunkwise form on the GPU, chunk 64, in two
/// launches: the chunk-local pass (parallel over chunks and value heads) and the state pass
/// (parallel over sequences, value heads and column blocks of V; sequential over chunks).
/// chunkwise_kernels<E> holds the kernels of each input type and which state pass a shape
/// takes; the call's plan (host/plan.cuh) holds that choice, the grids and the workspace.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "../core/family.hpp"
#include "../core/options.hpp"
#include "../core/tensor_view.hpp"
#include "host/call_setup.cuh"
#include "host/launch.cuh"
#include "host/plan.cuh"
#include "host/qk_normalization.cuh"
#include "host/supported_rule.cuh"
#include "kernels/chunk_gate_cumsum.cuh"
#include "kernels/chunk_local_mma.cuh"
#include "kernels/chunk_local_per_key.cuh"
#include "kernels/chunk_local_wmma.cuh"
#include "kernels/chunk_output_mma.cuh"
#include "kernels/chunk_start_states.cuh"
#include "kernels/chunk_state_mma.cuh"
#include "kernels/chunk_state_specialized.cuh"
#include "kernels/chunk_state_wmma.cuh"
#include "tile/dims.cuh"

namespace linattn::cuda {

namespace detail {

/// The chunkwise kernels of an input type: which state pass a call takes (`state_pass_for`, from
/// the shape and the multiprocessor count) and the launches of its plan (`run`).
template <class E>
struct chunkwise_kernels {
  static_assert(linattn::detail::always_false<E>,
                "linattn::cuda: the chunkwise kernels take float, __half or __nv_bfloat16 inputs");
  template <class Rule>
  static state_pass state_pass_for(const problem&, index_t) { return {}; }  // (no follow-on errors)
  template <class Rule, int K, int V>
  static void run(const chunkwise_plan<E>&, const chunk_args<Rule, E>&, cudaStream_t) {}
};

/// Per-key decays take their own chunk-local pass, for every input type (products in `Op`;
/// kernels/chunk_local_per_key.cuh), and the state passes of the other rules.
template <class Rule>
inline constexpr bool per_key_decays = Rule::decay == decay_kind::vector;

template <class Rule, class E, int K, int V, class Op>
void launch_per_key_local(const chunkwise_plan<E>& plan, const chunk_args<Rule, E>& args, cudaStream_t stream) {
  if (plan.n_chunks > 0)
    launch<chunk_local_per_key_storage<K, V>>(chunk_local_per_key_kernel<Rule, E, K, V, Op>, plan.local_grid, args, stream,
                                              "chunk_local_per_key_kernel");
}

/// What runs before state pass `s`: the chunk-local pass, unless the chunk's scores are formed
/// after it (the register-resident passes: 4 groups of 2 warps, or one-warp groups; the
/// warp-specialised pass where it forms them itself; the two-pass forward's output pass), which
/// then needs the gate cumsums alone (scalar decay) or nothing.
template <class Rule>
constexpr first_pass first_pass_for(state_pass s, index_t K, index_t V) {
  const bool specialized = s == state_pass::specialized_16 || s == state_pass::specialized_32;
  const bool own = two_pass(s) || (s == state_pass::mma_split && forms_own_scores<Rule, 2>) ||
                   (s == state_pass::mma_wide && forms_own_scores<Rule, 1>) ||
                   (specialized && specialized_forms_own_scores<Rule>(int(K), int(state_columns(s, V))));
  if (!own) return first_pass::chunk_local;
  return Rule::decay == decay_kind::scalar ? first_pass::gate_cumsum : first_pass::none;
}

/// fp32: WMMA in both passes, the state in shared memory; the block products in 3xTF32 or,
/// with options::precision = tf32, in one TF32 product (`Op`, tile/block_gemm.cuh).
template <>
struct chunkwise_kernels<float> {
  /// 32 value columns per block, or 16 when that leaves multiprocessors idle.
  template <class Rule>
  static state_pass state_pass_for(const problem& p, index_t sms) {
    return p.N * p.HV * (p.V / 32) >= sms ? state_pass::wmma_32 : state_pass::wmma_16;
  }

  template <class Rule, int K, int V>
  static void run(const chunkwise_plan<float>& plan, const chunk_args<Rule, float>& args, cudaStream_t stream) {
    if (plan.products == product_precision::tf32) return run_with<Rule, K, V, single_tf32>(plan, args, stream);
    run_with<Rule, K, V, float>(plan, args, stream);
  }

 private:
  template <class Rule, int K, int V, class Op>
  static void run_with(const chunkwise_plan<float>& plan, const chunk_args<Rule, float>& args, cudaStream_t stream) {
    if constexpr (per_key_decays<Rule>)
      launch_per_key_local<Rule, float, K, V, Op>(plan, args, stream);
    else if (plan.n_chunks > 0)
      launch<chunk_local_wmma_storage<Rule, float, K, V>>(chunk_local_wmma_kernel<Rule, float, K, V, Op>, plan.local_grid,
                                                          args, stream, "chunk_local_wmma_kernel");
    const auto state = [&](auto bv) {
      constexpr int BV = decltype(bv)::value;
      launch<chunk_state_wmma_storage<Rule, float, K, BV>>(chunk_state_wmma_kernel<Rule, float, K, BV, Op>, plan.state_grid, args,
                                                     stream, "chunk_state_wmma_kernel");
    };
    if (plan.state == state_pass::wmma_32) state(std::integral_constant<int, 32>{});
    else state(std::integral_constant<int, 16>{});
  }
};

/// 16-bit inputs: mma.sync tiles in registers. With few sequences x heads (16-column groups
/// <= 2 per multiprocessor) the additive rules take the two-pass forward (the chunk-start
/// states alone, then the outputs of every chunk in parallel), and the delta rules, with
/// kernels built for sm_90, the warp-specialised state pass, with
/// the fewer value columns per block (16 or 32) with which its blocks fit on the
/// multiprocessors at once. Otherwise 16
/// value columns per warp group, state in registers, output formed in the same warps; one block
/// fits per multiprocessor, so the shape picks how wide a block is: up to 4 groups per
/// multiprocessor take 4 groups of 2 warps (splitting each group's key columns), more take all
/// value columns in one block of one-warp groups: as few blocks as fill the multiprocessors,
/// each reading the chunk's Q, K, W tiles once. There the additive rule without a decay
/// (Hebbian) runs no chunk-local pass, and ScalarDecay none beside the one-warp groups: the
/// state pass forms their scores (ScalarDecay's from b that a small pass writes).
template <class E>
struct chunkwise_mma_kernels {
  /// b of every chunk and value head alone (chunk_gate_cumsum.cuh).
  template <class Rule>
  static void launch_gate_cumsum(const chunkwise_plan<E>& plan, const chunk_args<Rule, E>& args, cudaStream_t stream) {
    using S = chunk_gate_cumsum_storage;
    const dim3 grid(unsigned((plan.n_chunks + S::chunks_per_block - 1) / S::chunks_per_block), plan.local_grid.y);
    chunk_gate_cumsum_kernel<Rule, E><<<grid, S::threads, 0, stream>>>(args, unsigned(plan.n_chunks));
    check_launch("chunk_gate_cumsum_kernel");
  }

  /// The head sizes at which the additive rules may take the two-pass forward (measured on an
  /// H100 against the single pass, bench/cuda/NOTES.md): K = V = 64, and K = V = 128 with the
  /// state pass's blocks split along the keys and its chunk-start states stored as 16-byte
  /// pieces; with the earlier 4-byte stores the L2 cache bounded that pass and at 128 the two
  /// passes took 1.14-1.46x the single pass's time.
  static constexpr bool two_pass_heads(index_t K, index_t V) { return K == V && (K == 64 || K == 128); }

  /// Blocks of the two-pass forward's state pass with `columns` value columns per block.
  static index_t start_state_blocks(const problem& p, index_t columns) {
    return p.N * p.HV * (p.V / columns) * (p.K / start_state_rows(p.K));
  }

  /// Whether a call takes the two-pass forward: an additive rule (no decay or a scalar one) at
  /// those head sizes, where the state pass's blocks fit the multiprocessors one each. At
  /// K = V = 64, Hebbian needs 16-column blocks for that: with 32 the warp-specialised pass,
  /// which forms Hebbian's scores itself, took 0.86x the two passes' time; ScalarDecay's two
  /// passes won with 16 or 32. At 128 both rules take them with up to 64-column blocks.
  template <class Rule>
  static bool takes_two_passes(const problem& p, index_t sms) {
    if (!takes_start_states<Rule> || !two_pass_heads(p.K, p.V)) return false;
    const index_t columns = p.K == 128 ? 64 : Rule::decay == decay_kind::none ? 16 : 32;
    return start_state_blocks(p, columns) <= sms;
  }

  /// The two-pass forward's value columns per block of its state pass: the narrower choice where
  /// its blocks still fit the multiprocessors one each (every block reads the chunk's key rows,
  /// so narrower blocks multiply the key traffic): 16 or 32 at K = V = 64, 32 or 64 at 128.
  static state_pass start_states_for(const problem& p, index_t sms) {
    const bool narrow = start_state_blocks(p, p.K == 128 ? 32 : 16) <= sms;
    if (p.K == 128) return narrow ? state_pass::start_states_32 : state_pass::start_states_64;
    return narrow ? state_pass::start_states_16 : state_pass::start_states_32;
  }

  template <class Rule>
  static state_pass state_pass_for(const problem& p, index_t sms) {
    if (takes_two_passes<Rule>(p, sms)) return start_states_for(p, sms);
    if (p.N * p.HV * (p.V / 32) <= sms && bulk_copies_compiled())  // (sm_90: bulk copies)
      return p.N * p.HV * (p.V / 16) <= sms ? state_pass::specialized_16 : state_pass::specialized_32;
    return p.N * p.HV * (p.V / 16) <= 4 * sms ? state_pass::mma_split : state_pass::mma_wide;
  }

  template <class Rule, int K, int V>
  static void run(const chunkwise_plan<E>& plan, const chunk_args<Rule, E>& args, cudaStream_t stream) {
    if constexpr (per_key_decays<Rule>)  // fp32 tiles, one TF32 product per step (finer than the inputs)
      launch_per_key_local<Rule, E, K, V, single_tf32>(plan, args, stream);
    else if (plan.n_chunks > 0 && plan.first == first_pass::chunk_local)
      launch<chunk_local_mma_storage<Rule, E, K, V>>(chunk_local_mma_kernel<Rule, E, K, V>, plan.local_grid, args, stream,
                                                     "chunk_local_mma_kernel");
    else if constexpr (Rule::decay == decay_kind::scalar)  // the state pass forms the scores from b
      if (plan.n_chunks > 0 && plan.first == first_pass::gate_cumsum) launch_gate_cumsum(plan, args, stream);
    const auto specialized = [&](auto bv) {
      constexpr int BV = decltype(bv)::value;
      static_assert(V % BV == 0, "whole column blocks");
      launch<chunk_state_specialized_storage<Rule, E, K, BV>>(chunk_state_specialized_kernel<Rule, E, K, BV>, plan.state_grid,
                                                              args, stream, "chunk_state_specialized_kernel");
    };
    const auto fused = [&](auto groups, auto split) {
      constexpr int G = decltype(groups)::value, S = decltype(split)::value;
      launch<chunk_state_mma_storage<Rule, E, K, G, S>>(chunk_state_mma_kernel<Rule, E, K, G, S>, plan.state_grid, args,
                                                        stream, "chunk_state_mma_kernel");
    };
    const auto two_pass = [&](auto bv) {
      if constexpr (takes_start_states<Rule> && two_pass_heads(K, V)) {
        constexpr int BV = decltype(bv)::value, BK = int(start_state_rows(K));
        launch<chunk_start_states_storage<E, BK, BV>>(chunk_start_states_kernel<Rule, E, K, BV>, plan.state_grid, args,
                                                      stream, "chunk_start_states_kernel");
        if (plan.n_chunks > 0)
          launch<chunk_output_storage<E, K, V>>(chunk_output_mma_kernel<Rule, E, K, V>, plan.output_grid, args, stream,
                                                "chunk_output_mma_kernel");
      }
    };
    using std::integral_constant;
    switch (plan.state) {
      case state_pass::start_states_16: return two_pass(integral_constant<int, 16>{});
      case state_pass::start_states_32: return two_pass(integral_constant<int, 32>{});
      case state_pass::start_states_64: return two_pass(integral_constant<int, 64>{});
      case state_pass::specialized_16: return specialized(integral_constant<int, 16>{});
      case state_pass::specialized_32: return specialized(integral_constant<int, 32>{});
      case state_pass::mma_split: return fused(integral_constant<int, 4>{}, integral_constant<int, 2>{});
      default: return fused(integral_constant<int, V / 16>{}, integral_constant<int, 1>{});
    }
  }
};

template <>
struct chunkwise_kernels<__half> : chunkwise_mma_kernels<__half> {};
template <>
struct chunkwise_kernels<__nv_bfloat16> : chunkwise_mma_kernels<__nv_bfloat16> {};

}  // namespace detail

/// Same inputs, layouts and options as linattn::chunkwise_forward, on device memory, queued
/// on `stream`. options::cu_seqlens may live in host or device memory (it is read on the host,
/// which synchronises); options::chunk_size must be 64; options::precision picks the float
/// inputs' tensor-core products (exact or tf32); options::checkpoints (device memory,
/// checkpoint_every a multiple of 64) as on the CPU, written by the state pass at chunk ends.
/// Throws linattn::error before anything is queued when an argument is invalid.
template <rule Rule, class T>
void chunkwise_forward(const std::type_identity_t<typename Rule::template inputs<std::remove_const_t<T>>>& in,
                       tensor_view<T, 4> out, const options<float>& opt = {}, cudaStream_t stream = nullptr) {
  using E = std::remove_const_t<T>;
  using kernels = detail::chunkwise_kernels<E>;
  detail::require_supported<Rule, E>();
  const detail::host_seqlens cu(opt.cu_seqlens);
  const auto p = detail::validate<Rule, E>(detail::form::chunkwise, in, out, opt, nullptr, cu);
  const detail::state_pass state = kernels::template state_pass_for<Rule>(p, detail::multiprocessors());
  const detail::chunkwise_plan<E> plan(p, state, opt.precision, detail::per_key_decays<Rule>,
                                       detail::first_pass_for<Rule>(state, p.K, p.V));
  detail::scratch ws(plan.workspace.bytes, stream);
  const detail::normalized_qk<typename Rule::template inputs<E>> qk(in, opt.normalize_qk, stream);
  detail::chunk_args<Rule, E> args(qk.inputs(), out, opt.initial_state, opt.final_state, p);
  detail::with_checkpoints(args, opt, p);
  plan.bind(args, ws, p, stream);
  detail::with_dims(p.K, p.V, [&](auto k, auto v) {
    kernels::template run<Rule, decltype(k)::value, decltype(v)::value>(plan, args, stream);
  });
}

}  // namespace linattn::cuda
