// SPDX-License-Identifier: MIT
/// \file
/// Asynchronous global-to-shared copies (cp.async, sm_80+): a block issues every load of a
/// tile set at once and waits once, and the chunk loops prefetch the next chunk while they
/// compute on the current one.
#pragma once

#include <cstdint>

namespace linattn::cuda::detail {

/// Copies 16 bytes global -> shared without staging through registers (L2 only).
__device__ inline void copy_async_16(void* dst, const void* src) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
}

/// Closes the group of copies issued so far by this thread.
__device__ inline void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }

/// Waits until at most `Pending` of this thread's groups are still in flight (then the block
/// synchronises before reading what others copied).
template <int Pending>
__device__ inline void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

}  // namespace linattn::cuda::detail
