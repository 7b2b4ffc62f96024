// SPDX-License-Identifier: MIT
/// \file
/// Umbrella header of the CUDA backend (target linattn::cuda, macro LINATTN_WITH_CUDA):
/// linattn::cuda::chunkwise_forward, chunkwise_backward, recurrent_forward and decode_step on device memory,
/// for the same rule structs, inputs, layouts and options as the CPU API. Needs no Eigen.
#pragma once

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/family.hpp"
#include "core/options.hpp"
#include "core/tensor_view.hpp"
#include "cuda/chunkwise.cuh"
#include "cuda/chunkwise_backward.cuh"
#include "cuda/recurrent.cuh"
#include "cuda/speculative.cuh"
#include "rules/delta.hpp"
#include "rules/gated_delta.hpp"
#include "rules/hebbian.hpp"
#include "rules/longhorn.hpp"
#include "rules/kda.hpp"
#include "rules/scalar_decay.hpp"
#include "rules/vector_decay.hpp"
