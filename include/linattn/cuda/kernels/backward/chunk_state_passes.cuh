// SPDX-License-Identifier: MIT
/// \file
/// Backward passes 2 and 3 in one launch: they depend on pass 1 only, not on each other, so the
/// blocks of both (grid z: the N sequences of pass 2, then the N of pass 3) share the
/// multiprocessors, two per multiprocessor where their shared memory allows. Both are
/// sequential over chunks: run side by side, the call waits for the longer one, not for both.
#pragma once

#include <type_traits>

#include "chunk_state_grads.cuh"
#include "chunk_states.cuh"

namespace linattn::cuda::detail {

template <int K, int BV, bool PerKey = false>
struct chunk_state_passes_storage {
  static constexpr int threads = chunk_states_storage<K, BV, PerKey>::threads;
  static_assert(threads == chunk_state_grads_storage<K, BV, PerKey>::threads, "one block size for both passes");
  union {
    chunk_states_storage<K, BV, PerKey> forward;        // pass 2
    chunk_state_grads_storage<K, BV, PerKey> reverse;   // pass 3
  };
};

template <class Rule, class T, int K, int BV>
__global__ void __launch_bounds__(256) chunk_state_passes_kernel(backward_args<Rule, T> args) {
  static_assert(std::is_same_v<typename backward_args<Rule, T>::hand_over_type, float>,
                "the fp32 state passes hand U~ and dY over in place, as fp32");
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  const unsigned sequences = gridDim.z / 2;
  if (blockIdx.z < sequences) chunk_states_pass<Rule, T, K, BV>(args, blockIdx.z, dynamic_smem);
  else chunk_state_grads_pass<Rule, T, K, BV>(args, blockIdx.z - sequences, dynamic_smem);
}

}  // namespace linattn::cuda::detail
