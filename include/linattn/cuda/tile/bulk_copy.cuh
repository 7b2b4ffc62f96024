// SPDX-License-Identifier: MIT
/// \file
/// One-instruction tile copies (sm_90 bulk copies, the TMA unit): a whole tile that is laid out
/// in global memory exactly as in shared memory (padded rows included) arrives with one copy,
/// issued by one thread, instead of one cp.async per 16 bytes per thread. An mbarrier counts
/// the bytes; the threads that read the tile wait on its phase.
///
/// Below sm_90 (an A100 build, compute_80) these instructions do not exist: there each
/// function compiles to a trap, and the host never launches a kernel that uses them
/// (`bulk_copies_compiled`, host/launch.cuh, reads which architecture the kernels were built for).
#pragma once

#include <cstdint>

// The statement itself from sm_90 on (and in host passes); a trap below.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define LINATTN_BULK_COPY(...) __trap()
#else
#define LINATTN_BULK_COPY(...) __VA_ARGS__
#endif

namespace linattn::cuda::detail {

__device__ inline unsigned shared_address(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

/// Initialises an mbarrier for one arrival per phase (the thread that issues the copies); the
/// block synchronises before using it.
__device__ inline void mbarrier_init(std::uint64_t* bar) {
  LINATTN_BULK_COPY(asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(shared_address(bar)) : "memory"));
}

/// The phase's arrival, announcing `bytes` to arrive by bulk copies on `bar`.
__device__ inline void mbarrier_expect_bytes(std::uint64_t* bar, unsigned bytes) {
  LINATTN_BULK_COPY(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)),
                                 "r"(bytes)
                                 : "memory"));
}

/// Waits until the phase with parity `parity` of `bar` has completed (acquire: the bytes the
/// copies wrote are visible).
__device__ inline void mbarrier_wait(std::uint64_t* bar, unsigned parity) {
  LINATTN_BULK_COPY(asm volatile(
      "{\n .reg .pred done;\n wait_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait_%=;\n}\n" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory"));
}

/// Orders this thread's earlier accesses of shared memory (generic proxy: plain stores,
/// ldmatrix) before later bulk copies into it (async proxy) that a barrier orders after them.
__device__ inline void fence_proxy_async_shared() {
  LINATTN_BULK_COPY(asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"));
}

/// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared
/// memory, counted on `bar`.
__device__ inline void copy_bulk(void* dst, const void* src, unsigned bytes, std::uint64_t* bar) {
  LINATTN_BULK_COPY(asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                                 ::"r"(shared_address(dst)), "l"(src), "r"(bytes), "r"(shared_address(bar))
                                 : "memory"));
}

}  // namespace linattn::cuda::detail

#undef LINATTN_BULK_COPY
