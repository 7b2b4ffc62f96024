// SPDX-License-Identifier: MIT
/// \file
/// Chunkwise form, pass 3 of the two-pass forward of the additive rules for 16-bit inputs: the
/// outputs of every chunk at once, from the chunk-start states that chunk_start_states.cuh
/// wrote. One block per (chunk, value head, BV value columns) with 4 warps, warp w forming the
/// tokens [16 w, 16 w + 16):
///
///   scores = scale (Q K^T ⊙ Gam)                          [C, C]  (chunk_scores.cuh)
///   O = scale diag(exp b) Q H + scores V                  [C, BV]
///
/// with H [K, BV] the state at the chunk's start (rounded to T, as the single-pass state passes
/// round it for the same product) and b the chunk's gate cumsums (0 without a decay).
#pragma once

#include "../tile/async_copy.cuh"
#include "../tile/load_store.cuh"
#include "../tile/mma_sync.cuh"
#include "../tile/warp_rows_store.cuh"
#include "chunk_args.cuh"
#include "chunk_scores.cuh"
#include "chunk_start_states.cuh"

namespace linattn::cuda::detail {

template <class T, int K, int BV>
struct alignas(16) chunk_output_storage {
  static constexpr int warps = 4, threads = 32 * warps;
  static constexpr int ldk = K + pad<T>, ldv = BV + pad<T>, lds = chunk + pad<T>;  // 16-byte rows, off one bank
  static_assert(BV <= K, "each warp's rows of O are staged in its query rows");
  T queries[chunk][ldk];           // [C, K], then each warp's rows of O [C, BV]
  T keys[chunk][ldk];              // [C, K]
  T values[chunk][ldv];            // [C, BV]
  T state[K][ldv];                 // [K, BV]  H at the chunk's start
  T scores[chunk][lds];            // [C, C]   each warp's row block, formed by that warp
  alignas(16) float gates[chunk];  // [C]  b (scalar decay; not loaded without one)
};

template <class Rule, class T, int K, int BV>
__global__ void __launch_bounds__(128) chunk_output_mma_kernel(chunk_args<Rule, T> args) {
  static_assert(sizeof(T) == 2, "mma.sync on 16-bit inputs");
  static_assert(takes_start_states<Rule>, "the two-pass forward: additive rules with no decay or a scalar one");
  using S = chunk_output_storage<T, K, BV>;
  constexpr bool decay = Rule::decay == decay_kind::scalar;
  constexpr int NT = BV / 8, Th = S::threads;
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& smem = *reinterpret_cast<S*>(dynamic_smem);

  const auto [b, t0, hv, h, n] = args.block_chunk();
  const index_t v0 = index_t(blockIdx.z) * BV;
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, r0 = 16 * warp;
  load_rows<chunk, K, Th, T>(smem.queries[0], S::ldk, args.in.q, b, t0, n, h);
  load_rows<chunk, K, Th, T>(smem.keys[0], S::ldk, args.in.k, b, t0, n, h);
  load_rows<chunk, BV, Th, T>(smem.values[0], S::ldv, args.in.v, b, t0, n, hv, v0);
  const tensor_view<const T, 4> states(args.states);
  load_rows<K, BV, Th, T>(smem.state[0], S::ldv, states, index_t(blockIdx.x), 0, K, hv, v0);
  if constexpr (decay) args.template load_gate_cumsum<chunk>(smem.gates, int(blockIdx.x), hv, tid);
  commit_copies();
  wait_copies<0>();
  __syncthreads();

  // the warp's row block of the scores, read by the warp alone
  form_chunk_scores<K, 4>(smem.queries[0], smem.keys[0], S::ldk, decay ? smem.gates : nullptr, args.scale,
                          smem.scores[0], S::lds, warp);
  float o[NT][4] = {};
  mma_rows_kn<T, NT, K / 16>(o, smem.queries[0] + r0 * S::ldk, S::ldk, smem.state[0], S::ldv, lane);
  float f[2] = {args.scale, args.scale};
  if constexpr (decay) f[0] *= __expf(smem.gates[r0 + g]), f[1] *= __expf(smem.gates[r0 + g + 8]);
  for_tile_elements<BV>(lane, [&](int nt, int e, int, int) { o[nt][e] *= f[e >> 1]; });
  __syncwarp();
  // scores causal: k-steps up to the warp's row block
  mma_rows_kn<T, NT, chunk / 16>(o, smem.scores[0] + r0 * S::lds, S::lds, smem.values[0], S::ldv, lane, warp + 1);

  // the warp's rows of O, staged in its own (no longer read) query rows
  store_warp_rows(o, smem.queries[0] + r0 * S::ldk, S::ldk, lane, n - r0, args.out, b, t0 + r0, hv, v0);
}

}  // namespace linattn::cuda::detail
