// SPDX-License-Identifier: MIT
/// \file
/// The library's stream-ordered memory pool, one per device. The chunkwise form needs a
/// workspace of K + V + 64 input-type elements per token and value head (W, U, the intra-chunk
/// scores; more for the warp-specialised state pass, chunkwise.cuh) plus 256 bytes per chunk
/// and value head (the gate cumsums); taking it from a pool that keeps freed memory reserved
/// (release threshold unlimited) means repeated calls reuse it instead of mapping it anew after
/// every synchronisation, which costs about a millisecond per gigabyte. The memory stays reserved
/// until `linattn::cuda::trim_workspace()` hands it back.
#pragma once

#include <cuda_runtime.h>

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

}  // namespace detail

/// Returns the workspace memory the library keeps reserved on the current device to the
/// driver. Call it after the work that used it has finished (e.g. after a stream
/// synchronisation); later calls reserve memory again as they need it.
inline void trim_workspace() {
  detail::check(cudaMemPoolTrimTo(detail::workspace_pool(), 0), "cudaMemPoolTrimTo(workspace)");
}

}  // namespace linattn::cuda
