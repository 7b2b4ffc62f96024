// SPDX-License-Identifier: MIT
/// \file
/// Token-by-token recurrence on the device (the recurrent form and decode_step). One block of
/// W warps owns one sequence, one value head and 32 value columns of H = S^T [K, V]; thread
/// (w, j) keeps rows [w K/W, (w+1) K/W) of column j in registers, so the state is read once and
/// written once per call. Per token, with alpha = exp(g_t):
///
///   p = H^T k, r = H^T (scale q)               one pass over the registers, W-way reduction
///   u = beta (v - alpha p)   (additive: u = v)
///   o = alpha r + (k . scale q) u
///   H <- alpha H + k u^T
///
/// Per-key decays (VectorDecay, KDA) scale the rows first, H <- diag(exp g_t) H (exp g_t formed
/// once per key, in shared memory), and then run the same step with alpha = 1.
///
/// Optionally it also writes the state after every `every` tokens (checkpoints) and, for
/// verify_drafts, each token's write (k, u) and log gate instead of any state.
#pragma once

#include "../../core/draft_record.hpp"
#include "../../core/tensor_view.hpp"
#include "call_args.cuh"
#include "rule_coefficients.cuh"

namespace linattn::cuda::detail {

/// call_args plus what only the token recurrence writes: verify_drafts's compact record.
template <class Rule, class T>
struct token_args : call_args<Rule, T> {
  using call_args<Rule, T>::call_args;
  draft_record<float> record{};         // [N, L, HV, K | V | G] (core/draft_record.hpp), or not given
};

/// A token block's sequence, value head and first value column.
struct token_block {
  index_t n, hv, v0;
};

/// Where this block works. The grid is (N, HV, V / 32) or, with SlabsAdjacent (the plan's choice
/// for grids of many waves), one-dimensional with the V / 32 slabs of a head next to each other:
/// the blocks resident together then read and write whole 512-byte rows of a few states rather
/// than 128-byte pieces of many, and open fewer DRAM pages.
template <bool SlabsAdjacent>
__device__ inline token_block token_block_of(unsigned heads_per_sequence, unsigned slabs) {
  if constexpr (!SlabsAdjacent) return {index_t(blockIdx.x), index_t(blockIdx.y), index_t(blockIdx.z) * 32};
  const unsigned x = blockIdx.x, head = x / slabs;
  return {index_t(head / heads_per_sequence), index_t(head % heads_per_sequence), index_t(x % slabs) * 32};
}

/// Threads of the token kernel resident on a multiprocessor, its launch bound (64 registers a
/// thread; unbounded, the per-key rules took 128), so that the loads of more blocks are in
/// flight at large batches. The plan's waves follow from it.
inline constexpr int token_threads_per_multiprocessor = 1024;

/// Blocks of W warps of the token kernel resident on a multiprocessor at a time.
constexpr int token_blocks_per_multiprocessor(int W) { return token_threads_per_multiprocessor / (32 * W); }

/// Warps per block of the token kernel: 8 when the call has few blocks (the multiprocessors
/// are mostly idle and each block's instruction stream is the critical path: the rows of H
/// are split over more warps), else 4 (host/plan.cuh, token_plan).
template <class Rule, class T, int K, int W, bool SlabsAdjacent = false>
__global__ void __launch_bounds__(32 * W, token_blocks_per_multiprocessor(W)) token_kernel(token_args<Rule, T> args) {
  constexpr int R = K / W;
  static_assert(K % W == 0, "K must split over the warps");
  constexpr bool per_key = Rule::decay == decay_kind::vector;
  __shared__ float qk[2][2][K];      // [parity][q or k][K]
  __shared__ float partial[2][2][W][32];  // [parity][p or r][warp][column]
  __shared__ float key_gates[per_key ? 2 : 1][2][per_key ? K : 1];  // [parity][log gate, exp][K] (per-key decays)

  const token_block at = token_block_of<SlabsAdjacent>(unsigned(args.out.extent(2)), unsigned(args.out.extent(3) / 32));
  const index_t n_seq = at.n, hv = at.hv, v0 = at.v0;
  const index_t h = hv / args.group;
  const span s = args.sequence(n_seq);
  const index_t state_slot = args.slot(n_seq);  // state slot (pool); < 0: zero start, no write
  const index_t b = s.b;
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const index_t j = v0 + lane;
  const auto& in = args.in;

  // this thread's column of H: rows warp R + i, i < R, at rows[i * stride] of a state view
  // (the address formed once per view, not per element)
  const auto column = [&](auto& state, auto... lead) { return &state(lead..., hv, warp * R, j); };
  float hreg[R];
  if (args.s0.data() && state_slot >= 0) {
    const float* rows = column(args.s0, state_slot);
    const index_t stride = args.s0.stride(2);
#pragma unroll
    for (int i = 0; i < R; ++i) hreg[i] = rows[i * stride];
  } else {
#pragma unroll
    for (int i = 0; i < R; ++i) hreg[i] = 0.0f;
  }

  for (int step = 0; step < s.length; ++step) {
    const index_t t = s.start + step;
    const int par = step & 1;
    // the token's rows, one key per thread and pass, with a trip count known at compile time:
    // as a loop to blockDim, decode at B >= 32 took 2-4 % longer for four of the five rules
    // without per-key decays (Hebbian: 2 % less) and up to 1.2x longer for the per-key ones
    // (bench/cuda/NOTES.md, wave 2 session 38)
#pragma unroll
    for (int m = 0; m < (K + 32 * W - 1) / (32 * W); ++m) {
      const int i = tid + m * 32 * W;
      if (K % (32 * W) != 0 && i >= K) break;
      qk[par][0][i] = args.scale * to_float(in.q(b, t, h, i));
      qk[par][1][i] = to_float(in.k(b, t, h, i));
      if constexpr (per_key) {
        const float g = key_log_gate<Rule, T>(in, b, t, hv, i);
        key_gates[par][0][i] = g;
        key_gates[par][1][i] = __expf(g);
      }
    }
    const float v = to_float(in.v(b, t, hv, j));
    const float lg = log_gate<Rule, T>(in, b, t, hv);
    const float alpha = __expf(lg);
    __syncthreads();
    if constexpr (per_key)
#pragma unroll
      for (int i = 0; i < R; ++i) hreg[i] *= key_gates[par][1][warp * R + i];
    float p = 0.0f, r = 0.0f;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      p += hreg[i] * qk[par][1][warp * R + i];
      r += hreg[i] * qk[par][0][warp * R + i];
    }
    partial[par][0][warp][lane] = p;
    partial[par][1][warp][lane] = r;
    // k . q and ||k||^2, each warp for itself
    float kq = 0.0f, kk = 0.0f;
    for (int i = lane; i < K; i += 32) {
      kq += qk[par][1][i] * qk[par][0][i];
      kk += qk[par][1][i] * qk[par][1][i];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      kq += __shfl_xor_sync(0xffffffffu, kq, o);
      kk += __shfl_xor_sync(0xffffffffu, kk, o);
    }
    __syncthreads();
    p = 0.0f, r = 0.0f;
#pragma unroll
    for (int w = 0; w < W; ++w) {
      p += partial[par][0][w][lane];
      r += partial[par][1][w][lane];
    }
    float u = v;
    if constexpr (corrects<Rule>) u = write_strength<Rule, T>(in, b, t, hv, kk) * (v - alpha * p);
    if (warp == 0) args.out(b, t, hv, j) = from_float<T>(alpha * r + kq * u);
#pragma unroll
    for (int i = 0; i < R; ++i) hreg[i] = alpha * hreg[i] + qk[par][1][warp * R + i] * u;
    if (args.record.updates.data()) {  // verify_drafts: the write k u^T and the decay of draft token `step`
      if (warp == 0) args.record.updates(n_seq, step, hv, j) = u;
      if (v0 == 0) {
        for (int i = tid; i < K; i += 32 * W) args.record.keys(n_seq, step, hv, i) = qk[par][1][i];
        for (int i = tid; i < args.record.log_decay.extent(3); i += 32 * W) {
          if constexpr (per_key) args.record.log_decay(n_seq, step, hv, i) = key_gates[par][0][i];
          else args.record.log_decay(n_seq, step, hv, i) = lg;
        }
      }
    }
    if (const int entry = args.checkpoint_entry(step + 1, s.length); entry >= 0) {
      float* rows = column(args.checkpoints, n_seq, entry);
#pragma unroll
      for (int i = 0; i < R; ++i) rows[i * args.checkpoints.stride(3)] = hreg[i];
    }
  }
  if (args.s1.data() && state_slot >= 0) {
    float* rows = column(args.s1, state_slot);
    const index_t stride = args.s1.stride(2);
#pragma unroll
    for (int i = 0; i < R; ++i) rows[i * stride] = hreg[i];
  }
}

}  // namespace linattn::cuda::detail
