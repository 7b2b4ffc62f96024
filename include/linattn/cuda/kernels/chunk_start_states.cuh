// SPDX-License-Identifier: MIT
/// \file
/// Chunkwise form, pass 2 of the two-pass forward of the additive rules for 16-bit inputs
/// (Hebbian, ScalarDecay): the state recurrence alone. It writes the state at the start of
/// every chunk, from which the output pass (chunk_output_mma.cuh) forms the outputs of all
/// chunks in parallel. One block per (sequence, value head, BK key rows, BV value columns), with
/// BK = min(K, 64) (start_state_rows) and BK / 16 warps; warp w carries key rows
/// [16 w, 16 w + 16) of the block's H [BK, BV] in fp32 accumulator registers (for the additive
/// rules the key rows of H evolve independently). Per chunk i, with the block's columns of its
/// K and V tiles in shared memory:
///
///   states[i] = H                                          (rounded to T)
///   H <- exp(b_C) H + (diag(exp(b_C - b)) K)^T V            [BK, BV]
///
/// Each token's decay factor scales the key fragment in registers (the lane's tokens), so the
/// recurrence carries one product and no round trip through shared memory: per chunk, a wait
/// for the copies queued `Stages - 1` chunks earlier, one barrier, the product and the states'
/// stores (through the warp's slice of shared memory as whole 16-byte row pieces:
/// store_warp_rows), which nothing in the loop waits for. The output pass, not this loop, pays
/// for the queries and the scores; with few sequences x heads this chain is what the call's
/// time is made of.
#pragma once

#include <type_traits>

#include "../tile/async_copy.cuh"
#include "../tile/load_store.cuh"
#include "../tile/mma_sync.cuh"
#include "../tile/warp_rows_store.cuh"
#include "chunk_args.cuh"
#include "rule_coefficients.cuh"
#include "state_pass_decays.cuh"

namespace linattn::cuda::detail {

/// Whether a rule's forward may take the two passes: additive, with no decay or a scalar one.
template <class Rule>
inline constexpr bool takes_start_states = !corrects<Rule> && Rule::decay != decay_kind::vector;

/// Key rows of the state per block: at most 64, so that at K = 128 a head's state is split
/// along its keys too and each block reads half of every chunk's key rows.
constexpr index_t start_state_rows(index_t K) { return K < 64 ? K : 64; }

/// One chunk's tiles.
template <class T, int K, int BV>
struct alignas(16) chunk_start_states_tiles {
  static constexpr int ldk = K + pad<T>, ldv = BV + pad<T>;  // 16-byte rows, off one bank
  T keys[chunk][ldk];              // [C, K]
  T values[chunk][ldv];            // [C, BV]
  alignas(16) float gates[chunk];  // [C]  b (scalar decay; not loaded without one)
};

/// Shared memory of the pass for [BK, BV] blocks of the state: `Stages` tile buffers, chunk c in
/// buffer c % Stages, and each warp's rows of the chunk-start state on their way to memory.
template <class T, int BK, int BV, int Stages = 4>
struct chunk_start_states_storage {
  static constexpr int warps = BK / 16, threads = 32 * warps, stages = Stages;
  static constexpr int lds = BV + pad<T>;  // 16-byte rows, off one bank
  using tiles = chunk_start_states_tiles<T, BK, BV>;
  tiles buffer[Stages];
  alignas(16) T outgoing[warps][16][lds];  // [16, BV] per warp
};

template <class Rule, class T, int K, int BV>
__global__ void __launch_bounds__(2 * int(start_state_rows(K))) chunk_start_states_kernel(chunk_args<Rule, T> args) {
  static_assert(sizeof(T) == 2, "mma.sync on 16-bit inputs");
  static_assert(takes_start_states<Rule>, "the two-pass forward: additive rules with no decay or a scalar one");
  constexpr int BK = int(start_state_rows(K));
  static_assert(BV % 16 == 0 && BK % 16 == 0 && K % BK == 0, "whole 16-column steps, 16 key rows per warp");
  using S = chunk_start_states_storage<T, BK, BV>;
  using tiles = typename S::tiles;
  using decays = state_pass_decays<Rule, K>;
  constexpr bool decay = Rule::decay == decay_kind::scalar;
  constexpr int NT = BV / 8, Th = S::threads, P = S::stages;
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& smem = *reinterpret_cast<S*>(dynamic_smem);

  // blockIdx.x: the block's key rows [k_first, k_first + BK) (slow) and value columns [v0, v0 + BV)
  const int v_blocks = int(gridDim.x) / (K / BK);
  const index_t n_seq = blockIdx.z, hv = blockIdx.y, v0 = index_t(int(blockIdx.x) % v_blocks) * BV, h = hv / args.group;
  const int k_first = int(blockIdx.x) / v_blocks * BK;
  const span s = args.sequence(n_seq);
  const index_t state_slot = args.slot(n_seq);  // state slot (pool); < 0: zero start, no write
  const index_t b = s.b;
  const int end = s.start + s.length, chunks = (s.length + chunk - 1) / chunk;
  const int tid = int(threadIdx.x), lane = tid % 32, g = lane / 4, t = lane % 4, warp = tid / 32;
  const int k0 = 16 * warp;  // the warp's key rows in the tiles; k_first + k0 in the state
  const auto col = [&](int nt, int e) { return 8 * nt + 2 * t + (e & 1); };
  const auto key = [&](int e) { return k_first + k0 + g + 8 * (e >> 1); };
  const ldm_lane bl = ldm_lane::b_tiles(lane), kl = ldm_lane::kn_tiles(lane);

  // H(key(e), v0 + col(nt, e)) = hs[nt][e]
  float hs[NT][4];
  const auto for_state = [&](auto&& f) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) f(nt, e);
  };
  // H on this warp's key rows into at(key, value column) (the final state or a checkpoint)
  const auto store_state = [&](auto&& at) {
    for_state([&](int nt, int e) { at(key(e), v0 + col(nt, e)) = hs[nt][e]; });
  };
  for_state([&](int nt, int e) {
    hs[nt][e] = args.s0.data() && state_slot >= 0 ? args.s0(state_slot, hv, key(e), v0 + col(nt, e)) : 0.0f;
  });

  const row_source<chunk, BK, Th, T> keys(args.in.k, b, h, k_first, tid);
  const row_source<chunk, BV, Th, T> values(args.in.v, b, hv, v0, tid);
  // chunk c's copies into buffer c % P, one commit group per chunk (empty past the last, so that
  // `wait_copies<P - 2>` always leaves exactly the later chunks' pending)
  const auto load = [&](int c) {
    if (c < chunks) {
      tiles& buf = smem.buffer[c % P];
      const int from = s.start + c * chunk, n = min(chunk, end - from);
      keys.issue(buf.keys[0], tiles::ldk, args.in.k, from, n);
      values.issue(buf.values[0], tiles::ldv, args.in.v, from, n);
      if constexpr (decay) args.template load_gate_cumsum<chunk>(buf.gates, s.first_chunk + c, hv, tid);
    }
    commit_copies();
  };
  for (int c = 0; c < P - 1; ++c) load(c);
  for (int c = 0; c < chunks; ++c) {
    const int t0 = s.start + c * chunk;
    wait_copies<P - 2>();
    __syncthreads();  // chunk c's tiles are in; every warp is done with chunk c - 1's buffer
    load(c + P - 1);
    const tiles& buf = smem.buffer[c % P];

    // the chunk's start state, for the output pass: the warp's [16, BV] through shared memory
    // into 16-byte stores of whole row pieces (4-byte stores of column pairs, as the fragments
    // hold them, made the L2 cache this loop's bound)
    store_warp_rows<T, NT, true>(hs, smem.outgoing[warp][0], S::lds, lane, 16, args.states, s.first_chunk + c,
                                 k_first + k0, hv, v0);  // the workspace's rows: contiguous, 16-byte aligned

    // H <- exp(b_C) H + (diag(exp(b_C - b)) K)^T V on this warp's key rows (K^T read transposed
    // from the token-major key tile; A's columns are tokens 2t, 2t + 1, 2t + 8, 2t + 9)
    if constexpr (decay) {
      const float d = decays::of_key(buf.gates, 0);
      for_state([&](int nt, int e) { hs[nt][e] *= d; });
    }
#pragma unroll
    for (int q = 0; q < chunk / 16; ++q) {
      std::uint32_t ak[4];
      ldmatrix_x4<true>(ak, buf.keys[0] + (16 * q + bl.row) * tiles::ldk + k0 + bl.col);
      if constexpr (decay) {
        const int r = 16 * q + 2 * t;
        const float f[4] = {decays::to_end(buf.gates, r), decays::to_end(buf.gates, r + 1),
                            decays::to_end(buf.gates, r + 8), decays::to_end(buf.gates, r + 9)};
        scale_a<T>(ak, f);
      }
#pragma unroll
      for (int p = 0; p < NT / 2; ++p) {
        std::uint32_t bv[4];
        ldmatrix_x4<true>(bv, buf.values[0] + (16 * q + kl.row) * tiles::ldv + 16 * p + kl.col);
        mma_pair<T>(hs[2 * p], hs[2 * p + 1], ak, bv);
      }
    }
    if (const int entry = args.checkpoint_entry(min(t0 + chunk, end) - s.start, s.length); entry >= 0)
      store_state([&](index_t k, index_t v) -> float& { return args.checkpoints(n_seq, entry, hv, k, v); });
  }
  if (args.s1.data() && state_slot >= 0)
    store_state([&](index_t k, index_t v) -> float& { return args.s1(state_slot, hv, k, v); });
}

}  // namespace linattn::cuda::detail
