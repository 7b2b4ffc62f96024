// SPDX-License-Identifier: MIT
/// \file
/// Backward device tests: the per-key decay rules VectorDecay and KDA (backward_runs.cuh; their
/// bad calls are the other rules' shared checks, so only the gradient runs are instantiated).
#include "backward_runs.cuh"

namespace cuda_tests {

template backward_outcome run_backward<la::VectorDecay>(const ref::problem&, const std::vector<double>&,
                                                        const std::vector<double>&, dtype, const config&);
template backward_outcome run_backward<la::KDA>(const ref::problem&, const std::vector<double>&,
                                                const std::vector<double>&, dtype, const config&);

}  // namespace cuda_tests
