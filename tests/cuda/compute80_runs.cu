// SPDX-License-Identifier: MIT
/// \file
/// The chunkwise form built for compute_80 alone (CMake CUDA_ARCHITECTURES 80-virtual): no
/// sm_90 instruction may reach its PTX, so the warp-specialised state pass (bulk copies)
/// compiles to traps here and the host must pick a register-resident state pass instead,
/// whatever the GPU. bfloat16 only: the 16-bit inputs are the ones with a Hopper-only pass.
#include "compute80_runs.hpp"
#include "device_runs.cuh"

namespace cuda_tests::compute80 {

template <class Rule>
outcome chunkwise_bf16(const ref::problem& p, const config& c) {
  return run_typed<Rule, __nv_bfloat16>(p, form::chunkwise, c);
}

template outcome chunkwise_bf16<la::Hebbian>(const ref::problem&, const config&);
template outcome chunkwise_bf16<la::ScalarDecay>(const ref::problem&, const config&);
template outcome chunkwise_bf16<la::Delta>(const ref::problem&, const config&);
template outcome chunkwise_bf16<la::GatedDelta>(const ref::problem&, const config&);
template outcome chunkwise_bf16<la::Longhorn>(const ref::problem&, const config&);

}  // namespace cuda_tests::compute80
