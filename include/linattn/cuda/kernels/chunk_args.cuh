// SPDX-License-Identifier: MIT
/// \file
/// Arguments of the chunkwise kernels: the call's (call_args.cuh), the chunk table, and the
/// workspace through which the chunk-local pass hands W, U, the masked
/// intra-chunk scores and the gate cumsums to the sequential state pass.
#pragma once

#include "../../core/tensor_view.hpp"
#include "../tile/async_copy.cuh"
#include "call_args.cuh"

namespace linattn::cuda::detail {

template <class Rule, class T>
struct chunk_args : call_args<Rule, T> {
  using call_args<Rule, T>::call_args;
  const span* chunks = nullptr;           // [chunks], or null: `length` tokens per batch row
  // workspace, written by the chunk-local pass
  tensor_view<T, 4> w;                    // [B, T, HV, K]  W = T diag(exp b) K
  tensor_view<T, 4> u;                    // [B, T, HV, V]  U = T V
  tensor_view<T, 4> scores;               // [B, T, HV, chunk]  scale (Q K^T ⊙ Gam), causal; only the 16x16
                                          // tiles on or below the diagonal are written
  // W, scores: memory [B, T, HV, *], or for the warp-specialised state pass [B, HV, T, * + pad]
  tensor_view<T, 4> keys, queries;        // [B, T, HV, K]  copies of K and Q for the warp-specialised state
                                          // pass only (null otherwise); memory [B, HV, T, K + pad]
  tensor_view<float, 3> gate_cumsum;      // [chunks, HV, C]  b = chunk-local cumsum of log gates, constant
                                          // past the chunk's end; 256 contiguous bytes per chunk and head

  /// Chunk i of the call (block i of a chunk-local launch): from the table, or chunk
  /// i % per_row of batch row i / per_row.
  __device__ span chunk_at(unsigned i) const {
    if (chunks) return chunks[i];
    const int per_row = (this->length + chunk - 1) / chunk, first = int(i % unsigned(per_row)) * chunk;
    return span{int(i / unsigned(per_row)), first, min(chunk, this->length - first), 0};
  }

  /// Queues the copy of the gate cumsums of chunk i, value head hv, into dst[0..C) (16-byte
  /// aligned shared memory) on the threads with tid < C / 4; the caller commits.
  __device__ void load_gate_cumsum(float* dst, int i, index_t hv, int tid) const {
    if (tid < chunk / 4) copy_async_16(dst + 4 * tid, &gate_cumsum(i, hv, 4 * tid));
  }
};

}  // namespace linattn::cuda::detail
