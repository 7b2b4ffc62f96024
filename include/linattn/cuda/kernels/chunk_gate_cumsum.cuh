// SPDX-License-Identifier: MIT
/// \file
/// The chunk-local cumsum b of the log gates alone, for a state pass that forms the rest of
/// what the chunk-local pass would (chunk_scores.cuh): one warp per (chunk, value head), two
/// tokens per lane and a warp scan, written to chunk_args::gate_cumsum as the chunk-local pass
/// writes it (0 past the chunk's tokens, so b stays constant there).
#pragma once

#include "../tile/warp_sums.cuh"
#include "chunk_args.cuh"
#include "rule_coefficients.cuh"

namespace linattn::cuda::detail {

/// The kernel's launch shape: `chunks_per_block` warps, no shared memory.
struct chunk_gate_cumsum_storage {
  static constexpr int chunks_per_block = 4, threads = 32 * chunks_per_block;
};

/// Grid (ceil(chunks / chunks_per_block), HV): warp w of block x scans chunk
/// chunks_per_block x + w of value head blockIdx.y.
template <class Rule, class T>
__global__ void __launch_bounds__(chunk_gate_cumsum_storage::threads) chunk_gate_cumsum_kernel(chunk_args<Rule, T> args,
                                                                                               unsigned n_chunks) {
  const int lane = int(threadIdx.x) % 32;
  const unsigned i = blockIdx.x * chunk_gate_cumsum_storage::chunks_per_block + threadIdx.x / 32;
  if (i >= n_chunks) return;
  const span c = args.chunk_at(i);
  const index_t hv = blockIdx.y;
  const int r = 2 * lane;
  const float g0 = r < c.length ? log_gate<Rule, T>(args.in, c.b, c.start + r, hv) : 0.0f;
  const float g1 = r + 1 < c.length ? log_gate<Rule, T>(args.in, c.b, c.start + r + 1, hv) : 0.0f;
  const float2 cum = warp_pair_prefix_sums(g0, g1, lane);  // the chunk-local pass's scan (chunk_coefficients.cuh)
  args.gate_cumsum(i, hv, r) = cum.x;
  args.gate_cumsum(i, hv, r + 1) = cum.y;
}

}  // namespace linattn::cuda::detail
