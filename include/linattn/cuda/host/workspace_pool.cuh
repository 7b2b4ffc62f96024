// SPDX-License-Identifier: MIT
/// \file
/// A call's workspace: spans of one allocation (laid out by the call's plan, plan.cuh) from the
/// library's stream-ordered memory pool, one per device, or from the caller's allocator
/// (set_workspace_allocator). The chunkwise form needs K + V + 64
/// input-type elements per token and value head (W, U, the intra-chunk scores; more for the
/// warp-specialised state pass) plus 256 bytes per chunk and value head (the gate cumsums); a
/// pool that keeps freed memory reserved (release threshold unlimited) lets repeated calls reuse
/// it instead of mapping it anew after every synchronisation (bench/cuda/NOTES.md, v7). The memory
/// stays reserved until `linattn::cuda::trim_workspace()` hands it back.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "../../core/error.hpp"

#include "status.cuh"

namespace linattn::cuda {

/// A caller's allocator for the calls' workspace, e.g. a framework's caching allocator (the
/// PyTorch package installs torch's). `allocate(bytes, stream, context)` returns device memory
/// (256-byte aligned) for work queued on `stream`, or null (the call then throws linattn::error). `release(p, bytes,
/// stream, context)` comes as soon as the call has queued its last kernel, before they run, so
/// the allocator must be stream-ordered: it may hand p out again only to work queued on `stream`
/// after that point (as cudaFreeAsync and torch's caching allocator do). Unset: the library's
/// own pool.
struct workspace_allocator {
  void* (*allocate)(std::size_t bytes, cudaStream_t stream, void* context) = nullptr;
  void (*release)(void* p, std::size_t bytes, cudaStream_t stream, void* context) = nullptr;
  void* context = nullptr;
};

namespace detail {

/// The pool of the current device, created on first use.
inline cudaMemPool_t workspace_pool() {
  static std::mutex mutex;
  static std::vector<cudaMemPool_t> pools;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  const std::lock_guard<std::mutex> lock(mutex);
  if (pools.size() <= std::size_t(device)) pools.resize(std::size_t(device) + 1, nullptr);
  cudaMemPool_t& pool = pools[std::size_t(device)];
  if (!pool) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    check(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate(workspace)");
    std::uint64_t keep = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
          "cudaMemPoolSetAttribute(workspace release threshold)");
  }
  return pool;
}

/// `count` elements of E at byte `offset` of a call's workspace.
template <class E>
struct workspace_span {
  std::size_t offset = 0, count = 0;
};

/// Lays workspace spans out one after the other, each 256-byte aligned.
struct workspace_layout {
  std::size_t bytes = 0;
  template <class E>
  workspace_span<E> take(std::size_t count) {
    const workspace_span<E> s{bytes, count};
    bytes += (count * sizeof(E) + 255) / 256 * 256;
    return s;
  }
};

/// The process's workspace allocator (set_workspace_allocator), guarded by one mutex.
struct installed_allocator {
  std::mutex mutex;
  workspace_allocator allocator;
  static installed_allocator& instance() {
    static installed_allocator a;
    return a;
  }
  workspace_allocator get() {
    const std::lock_guard<std::mutex> lock(mutex);
    return allocator;
  }
};

/// A call's workspace from the caller's allocator when one is installed, else from the pool;
/// handed back (stream-ordered) at scope exit.
class scratch {
 public:
  scratch(std::size_t bytes, cudaStream_t stream) : bytes_(bytes), stream_(stream) {
    if (!bytes) return;
    allocator_ = installed_allocator::instance().get();
    if (!allocator_.allocate) {
      check(cudaMallocFromPoolAsync(&ptr_, bytes, workspace_pool(), stream), "cudaMallocFromPoolAsync(workspace)");
      return;
    }
    ptr_ = allocator_.allocate(bytes, stream, allocator_.context);
    if (!ptr_)
      throw error("linattn::cuda: the installed workspace allocator returned no memory for " + std::to_string(bytes) +
                  " bytes");
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  ~scratch() {
    if (!ptr_) return;
    if (allocator_.allocate) allocator_.release(ptr_, bytes_, stream_, allocator_.context);
    else cudaFreeAsync(ptr_, stream_);
  }
  /// The elements of a span (the workspace is raw memory).
  template <class E>
  E* at(workspace_span<E> s) const {
    return reinterpret_cast<E*>(static_cast<unsigned char*>(ptr_) + s.offset);
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_;
  cudaStream_t stream_;
  workspace_allocator allocator_{};
};

/// Uploads a host table into its span (stream-ordered; the vector may die after); null if empty.
template <class E>
const E* upload(const scratch& ws, workspace_span<E> at, const std::vector<E>& table, cudaStream_t stream) {
  if (table.empty()) return nullptr;
  E* d = ws.at(at);
  check(cudaMemcpyAsync(d, table.data(), table.size() * sizeof(E), cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync(sequence table)");
  return d;
}

}  // namespace detail

/// Takes every later call's workspace from `a` (a default-constructed one: the library's pool
/// again) and returns the allocator it replaces. A process-wide setting, read each time a call
/// takes workspace.
/// Both `allocate` and `release` must be set, or neither.
inline workspace_allocator set_workspace_allocator(workspace_allocator a) {
  if (!a.allocate != !a.release)
    throw error("linattn::cuda::set_workspace_allocator: argument 'a' sets only one of allocate and release");
  auto& slot = detail::installed_allocator::instance();
  const std::lock_guard<std::mutex> lock(slot.mutex);
  const workspace_allocator before = slot.allocator;
  slot.allocator = a;
  return before;
}

/// Returns the workspace memory the library keeps reserved on the current device to the
/// driver. Call it after the work that used it has finished (e.g. after a stream
/// synchronisation); later calls reserve memory again as they need it.
inline void trim_workspace() {
  detail::check(cudaMemPoolTrimTo(detail::workspace_pool(), 0), "cudaMemPoolTrimTo(workspace)");
}

}  // namespace linattn::cuda
