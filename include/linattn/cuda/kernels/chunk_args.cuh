// SPDX-License-Identifier: MIT
/// \file
/// Arguments of the chunkwise kernels: the call's (call_args.cuh), the chunk table, and the
/// workspace through which the chunk-local pass hands W, U, the masked
/// intra-chunk scores and the decays (state_pass_decays.cuh) to the sequential state pass, and
/// the two-pass forward's state pass the chunk-start states to its output pass.
#pragma once

#include "../../core/family.hpp"
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
  tensor_view<T, 4> keys, queries;        // [B, T, HV, K]  the K and Q rows the state pass reads, when not the
                                          // inputs': copies for the warp-specialised state pass (memory
                                          // [B, HV, T, K + pad]), or for per-key decays K ⊙ exp(1 b_C^T - b)
                                          // and Q ⊙ exp(b); null otherwise
  tensor_view<T, 4> states;               // [chunks, K, HV, V]  the state at the start of every chunk (the
                                          // two-pass forward, chunk_start_states.cuh; memory [chunks, HV, K, V])
  tensor_view<float, 3> gate_cumsum;      // [chunks, HV, slots]  scalar decays: b = chunk-local cumsum of log
                                          // gates, constant past the chunk's end (slots = C); per-key decays:
                                          // exp(b_C) per key (slots = K); state_pass_decays.cuh

  /// Chunk i of the call (block i of a chunk-local launch): from the table, or chunk
  /// i % per_row of batch row i / per_row.
  __device__ span chunk_at(unsigned i) const {
    if (chunks) return chunks[i];
    const int per_row = (this->length + chunk - 1) / chunk, first = int(i % unsigned(per_row)) * chunk;
    return span{int(i / unsigned(per_row)), first, min(chunk, this->length - first), 0};
  }

  /// Where a block of a chunk-local launch (grid (chunks, HV)) works: its chunk's batch row b,
  /// first token t0 and length n, its value head hv and that head's q/k head h.
  struct chunk_position {
    index_t b, t0, hv, h;
    int n;
  };
  __device__ chunk_position block_chunk() const {
    const span c = chunk_at(blockIdx.x);
    const index_t hv = blockIdx.y;
    return {c.b, c.start, hv, hv / this->group, c.length};
  }

  /// Queues the copy of the decays of chunk i, value head hv, into dst[0..Slots) (16-byte
  /// aligned shared memory) on the threads with tid < Slots / 4; the caller commits.
  template <int Slots = chunk>
  __device__ void load_gate_cumsum(float* dst, int i, index_t hv, int tid) const {
    if (tid < Slots / 4) copy_async_16(dst + 4 * tid, &gate_cumsum(i, hv, 4 * tid));
  }

  /// The query (key) rows a state pass reads, with the head to index them by: the inputs' (head
  /// h), or for per-key decays the chunk-local pass's pre-scaled rows (value head hv).
  __device__ tensor_view<const T, 4> state_queries() const {
    if constexpr (Rule::decay == decay_kind::vector) return tensor_view<const T, 4>(queries);
    else return this->in.q;
  }
  __device__ tensor_view<const T, 4> state_keys() const {
    if constexpr (Rule::decay == decay_kind::vector) return tensor_view<const T, 4>(keys);
    else return this->in.k;
  }
  __device__ index_t state_head(index_t h, index_t hv) const { return Rule::decay == decay_kind::vector ? hv : h; }
};

}  // namespace linattn::cuda::detail
