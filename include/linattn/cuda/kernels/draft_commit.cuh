// SPDX-License-Identifier: MIT
/// \file
/// commit_drafts from a compact record (core/draft_record.hpp) on the device. One block owns
/// one committed (sequence, slot), one value head and 32 value columns; thread (w, j) keeps
/// rows [w K/4, (w+1) K/4) of column j in registers and computes, for a accepted tokens,
///
///   H[d, j] <- exp(g_0 + ... + g_{a-1}) H[d, j] + sum_i exp(g_{i+1} + ... + g_{a-1}) k_i[d] u_i[j]
///
/// The weights exp(g_{i+1} + ... + g_{a-1}) k_i[d] are formed once per block in shared memory,
/// `commit_tile` tokens at a time from the last accepted token back (one thread per key row
/// carries its suffix sum of log decays), and every thread reads them from there.
#pragma once

#include "../../core/commit_checks.hpp"
#include "../../core/draft_record.hpp"
#include "../../core/tensor_view.hpp"

namespace linattn::cuda::detail {

inline constexpr int commit_block_warps = 4;
inline constexpr int commit_tile = 8;  // tokens per shared-memory tile of weights

template <int K>
__global__ void __launch_bounds__(128)
    draft_commit_kernel(tensor_view<float, 4> pool, draft_record<float> rec, const linattn::detail::commit_entry* entries) {
  constexpr int W = commit_block_warps, R = K / W;
  static_assert(K % W == 0 && K <= 32 * W, "K must split over the warps, one key row per thread at most");
  __shared__ float weight[commit_tile][K];  // [token in tile][key row]
  __shared__ float suffix[K];               // g_{i+1} + ... + g_{a-1} per key row, then the whole sum
  const linattn::detail::commit_entry e = entries[blockIdx.x];
  const index_t hv = blockIdx.y, j = index_t(blockIdx.z) * 32 + threadIdx.x % 32;
  const int tid = int(threadIdx.x), warp = tid / 32;
  const bool per_key = rec.log_decay.extent(3) != 1;
  float h[R], acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) h[r] = pool(e.slot, hv, warp * R + r, j), acc[r] = 0.0f;  // loads in flight early
  if (tid < K) suffix[tid] = 0.0f;
  for (index_t end = e.accepted; end > 0; end -= commit_tile) {
    const index_t start = end > commit_tile ? end - commit_tile : 0;
    if (tid < K) {  // this tile's weights of key row tid, from its last token back
      float s = suffix[tid];
      for (index_t i = end - 1; i >= start; --i) {
        weight[i - start][tid] = __expf(s) * rec.keys(e.seq, i, hv, tid);
        s += rec.log_decay(e.seq, i, hv, per_key ? tid : 0);
      }
      suffix[tid] = s;
    }
    __syncthreads();
    for (index_t i = start; i < end; ++i) {
      const float u = rec.updates(e.seq, i, hv, j);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] += weight[i - start][warp * R + r] * u;
    }
    __syncthreads();  // the next tile overwrites the weights
  }
  __syncthreads();  // suffix complete (also when nothing was accepted in this block's view)
#pragma unroll
  for (int r = 0; r < R; ++r) pool(e.slot, hv, warp * R + r, j) = __expf(suffix[warp * R + r]) * h[r] + acc[r];
}

}  // namespace linattn::cuda::detail
