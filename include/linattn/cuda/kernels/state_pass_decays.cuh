// SPDX-License-Identifier: MIT
/// \file
/// How the state passes read a chunk's decays from the `slots` floats per chunk and value head
/// that the chunk-local pass hands them (chunk_args::gate_cumsum):
///
///  - scalar decays: b [C], the chunk-local cumsum of the log gates. Token r reads the chunk-start
///    state through exp(b_r), its write reaches the chunk end through exp(b_C - b_r), and every
///    key row of the state decays by exp(b_C);
///  - per-key decays (docs/math.md#kda): exp(b_C) [K], the decay of each key row. The
///    chunk-local pass has already scaled the query and key rows the state pass reads,
///    Q ⊙ exp(b) and K ⊙ exp(1 b_Cᵀ - b), so the per-token factors are 1.
#pragma once

#include "../../core/family.hpp"
#include "call_args.cuh"

namespace linattn::cuda::detail {

template <class Rule, int K>
struct state_pass_decays {
  static constexpr bool per_key = Rule::decay == decay_kind::vector;
  static constexpr int slots = per_key ? K : chunk;  // floats per chunk and value head

  /// Factor of token r's read of the chunk-start state.
  __device__ static float read(const float* gates, int r) {
    if constexpr (per_key) return 1.0f;
    else return __expf(gates[r]);
  }
  /// Factor of token r's write at the chunk end.
  __device__ static float to_end(const float* gates, int r) {
    if constexpr (per_key) return 1.0f;
    else return __expf(gates[chunk - 1] - gates[r]);
  }
  /// Decay of the state's key row k over the chunk.
  __device__ static float of_key(const float* gates, int k) {
    if constexpr (per_key) return gates[k];
    else return __expf(gates[chunk - 1]);
  }
};

}  // namespace linattn::cuda::detail
