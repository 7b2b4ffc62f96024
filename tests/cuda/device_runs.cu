// SPDX-License-Identifier: MIT
/// \file
/// Device tests: the caller-allocator check and the Hebbian and ScalarDecay instantiations
/// (device_runs.cuh has the rest; device_setup.cu the helpers that are not per rule).
#include "device_runs.cuh"

namespace cuda_tests {

namespace {

struct allocator_counts {
  int allocations = 0, releases = 0;
};

void* counted_allocate(std::size_t bytes, cudaStream_t stream, void* context) {
  ++static_cast<allocator_counts*>(context)->allocations;
  void* p = nullptr;
  return cudaMallocAsync(&p, bytes, stream) == cudaSuccess ? p : nullptr;
}

void counted_release(void* p, std::size_t, cudaStream_t stream, void* context) {
  ++static_cast<allocator_counts*>(context)->releases;
  cudaFreeAsync(p, stream);
}

}  // namespace

bool caller_allocator_serves(const ref::problem& p) {
  const outcome pooled = run<la::GatedDelta>(p, dtype::bf16, form::chunkwise, {});
  allocator_counts counts;
  const auto before = la::cuda::set_workspace_allocator({counted_allocate, counted_release, &counts});
  outcome mine;
  try {
    mine = run<la::GatedDelta>(p, dtype::bf16, form::chunkwise, {});
  } catch (...) {
    la::cuda::set_workspace_allocator(before);
    throw;
  }
  la::cuda::set_workspace_allocator(before);
  bool half_rejected = false;  // an allocator with allocate and no release
  try {
    la::cuda::set_workspace_allocator({counted_allocate, nullptr, &counts});
  } catch (const la::error& e) {
    half_rejected = std::string(e.what()).find("argument 'a' sets only one of allocate and release") != std::string::npos;
  }
  return half_rejected && counts.allocations > 0 && counts.allocations == counts.releases && mine.o == pooled.o && mine.s == pooled.s;
}

LINATTN_TEST_RULE(Hebbian)
LINATTN_TEST_RULE(ScalarDecay)

}  // namespace cuda_tests
