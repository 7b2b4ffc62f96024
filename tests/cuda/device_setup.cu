// SPDX-License-Identifier: MIT
/// \file
/// Device tests: the host-side helpers that are not per rule (device_runs.hpp), shared by the
/// test programs of every build architecture.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

#include <linattn/cuda.cuh>

#include "device_runs.hpp"

namespace cuda_tests {

namespace la = linattn;

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

int multiprocessors() { return la::cuda::detail::multiprocessors(); }

int compute_capability_major() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
    throw std::runtime_error("cudaDeviceGetAttribute(cudaDevAttrComputeCapabilityMajor) failed");
  return major;
}

bool bulk_copies_compiled() { return la::cuda::detail::bulk_copies_compiled(); }

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

}  // namespace cuda_tests
