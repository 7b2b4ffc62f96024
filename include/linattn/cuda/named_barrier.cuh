// SPDX-License-Identifier: MIT
/// \file
/// Named block barriers (PTX bar.sync / bar.arrive) for kernels whose warps have different
/// roles: a role synchronises its own warps without stopping the others, and a producer role
/// signals a consumer role without waiting (arrive) while the consumer waits (sync) on the
/// same barrier, both counting the threads of the two roles together. Id 0 is
/// __syncthreads'; a block has 16.
#pragma once

namespace linattn::cuda::detail {

/// Waits until `threads` threads (a multiple of 32) have reached barrier `id`.
__device__ inline void barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// Counts this warp's threads at barrier `id` without waiting; earlier memory accesses are
/// visible to the threads that wait there.
__device__ inline void barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace linattn::cuda::detail
