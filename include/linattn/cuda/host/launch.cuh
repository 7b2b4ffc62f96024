// SPDX-License-Identifier: MIT
/// \file
/// Kernel launches from a plan: the block size and the dynamic shared memory of a kernel come
/// from its typed shared storage (`Storage::threads`, `sizeof(Storage)`).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "status.cuh"

namespace linattn::cuda::detail {

/// Lets `kernel` take sizeof(Storage) bytes of dynamic shared memory (above the default 48 KiB).
template <class Storage, class Args>
void allow_storage(void (*kernel)(Args), const char* name) {
  const cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(Storage)));
  if (status != cudaSuccess) check(status, ("cudaFuncSetAttribute(" + std::string(name) + ")").c_str());
}

/// Queues `kernel` on `grid`, with the block size and sizeof of its shared storage.
template <class Storage, class Args>
void launch(void (*kernel)(Args), dim3 grid, const Args& args, cudaStream_t stream, const char* name) {
  allow_storage<Storage>(kernel, name);
  kernel<<<grid, Storage::threads, sizeof(Storage), stream>>>(args);
  check_launch(name);
}

/// An empty kernel whose attributes tell which architecture this translation unit's kernels
/// were built for on the current device (a template: defined in every unit that includes this).
template <class = void>
__global__ void architecture_probe_kernel() {}

/// Whether the kernels run here were compiled for sm_90 or later (their PTX architecture, the
/// __CUDA_ARCH__ they saw): only then do bulk copies (tile/bulk_copy.cuh) run rather than trap.
/// A build for sm_80 alone, or one that JIT-compiles compute_80 on a Hopper, answers no.
inline bool bulk_copies_compiled() {
  cudaFuncAttributes attributes{};
  check(cudaFuncGetAttributes(&attributes, architecture_probe_kernel<>), "cudaFuncGetAttributes");
  return attributes.ptxVersion >= 90;
}

/// How many blocks of `kernel` (with its storage) one multiprocessor holds at once.
template <class Storage, class Args>
int resident_blocks(void (*kernel)(Args), const char* name) {
  allow_storage<Storage>(kernel, name);
  int blocks = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Storage::threads, sizeof(Storage)),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return blocks;
}

}  // namespace linattn::cuda::detail
