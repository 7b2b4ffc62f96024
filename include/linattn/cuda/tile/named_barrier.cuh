// SPDX-License-Identifier: MIT
/// \file
/// Named block barriers (PTX bar.sync) for kernels whose warps have different roles: a role
/// synchronises its own warps without stopping the others, and the roles meet on a barrier
/// that counts the threads of both. Id 0 is __syncthreads'; a block has 16.
#pragma once

namespace linattn::cuda::detail {

/// Waits until `threads` threads (a multiple of 32) have reached barrier `id`.
__device__ inline void barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// Reaches barrier `id` of `threads` threads without waiting for it: a producer's signal. The
/// calling threads' earlier memory accesses are performed for the threads that wait on it
/// with barrier_sync (the consumers).
__device__ inline void barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace linattn::cuda::detail
