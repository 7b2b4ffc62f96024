// SPDX-License-Identifier: MIT
/// \file
/// Device tests, host side helpers that are not per rule, and the Hebbian and ScalarDecay
/// instantiations (device_runs.cuh has the rest).
#include "device_runs.cuh"

namespace cuda_tests {

namespace {

template <class E>
double round_to(double x) { return la::cuda::detail::to_float(la::cuda::detail::from_float<E>(float(x))); }

}  // namespace

bool device_present(std::string& why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    cudaGetLastError();
    return false;
  }
  if (n == 0) {
    why = "cudaGetDeviceCount found no device";
    return false;
  }
  return true;
}

int multiprocessors() { return linattn::cuda::detail::multiprocessors(); }

void round_inputs(ref::problem& p, dtype t, bool float_coefficients) {
  auto round_all = [&](std::vector<double>& x) { round_values(x, t); };
  round_all(p.q), round_all(p.k), round_all(p.v);
  if (float_coefficients) round_values(p.g, dtype::f32), round_values(p.beta, dtype::f32);
  else round_all(p.g), round_all(p.beta);
  for (auto& e : p.s0) e = double(float(e));  // the state is fp32 on the device
}

void round_values(std::vector<double>& x, dtype t) {
  for (auto& e : x) e = t == dtype::f32 ? round_to<float>(e) : t == dtype::f16 ? round_to<__half>(e) : round_to<__nv_bfloat16>(e);
}

void trim_workspace() {
  if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error("cudaDeviceSynchronize failed");
  la::cuda::trim_workspace();
}

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
