// SPDX-License-Identifier: MIT
/// \file
/// A call's workspace: spans of one allocation (laid out by the call's plan, plan.cuh) from the
/// library's stream-ordered memory pool, one per device. The chunkwise form needs K + V + 64
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
#include <vector>

#include "status.cuh"

namespace linattn::cuda {

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

/// A call's workspace from the pool, freed (stream-ordered) at scope exit.
class scratch {
 public:
  scratch(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes) check(cudaMallocFromPoolAsync(&ptr_, bytes, workspace_pool(), stream), "cudaMallocFromPoolAsync(workspace)");
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  ~scratch() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
  }
  /// The elements of a span (the workspace is raw memory).
  template <class E>
  E* at(workspace_span<E> s) const {
    return reinterpret_cast<E*>(static_cast<unsigned char*>(ptr_) + s.offset);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
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

/// Returns the workspace memory the library keeps reserved on the current device to the
/// driver. Call it after the work that used it has finished (e.g. after a stream
/// synchronisation); later calls reserve memory again as they need it.
inline void trim_workspace() {
  detail::check(cudaMemPoolTrimTo(detail::workspace_pool(), 0), "cudaMemPoolTrimTo(workspace)");
}

}  // namespace linattn::cuda
