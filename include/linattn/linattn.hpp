// SPDX-License-Identifier: MIT
/// \file
/// Umbrella header of the CPU library: views, options, errors, every rule and every form.
/// (The CUDA backend lives in <linattn/cuda.cuh> and is never included from here.)
#pragma once

#include "core/backward.hpp"
#include "core/config.hpp"
#include "core/version.hpp"
#include "core/error.hpp"
#include "core/family.hpp"
#include "core/options.hpp"
#include "core/tensor_view.hpp"
#include "forms/chunkwise.hpp"
#include "forms/chunkwise_backward.hpp"
#include "forms/decode.hpp"
#include "forms/parallel.hpp"
#include "forms/recurrent.hpp"
#include "forms/recurrent_backward.hpp"
#include "forms/speculative.hpp"
#include "rules/hebbian.hpp"
#include "rules/scalar_decay.hpp"
#include "rules/vector_decay.hpp"
#include "rules/delta.hpp"
#include "rules/gated_delta.hpp"
#include "rules/longhorn.hpp"
#include "rules/ttt_linear.hpp"
#include "rules/nlms.hpp"
#include "rules/rls.hpp"
#include "rules/softmax_attention.hpp"
#include "rules/local_linear_attention.hpp"
#include "core/kv_cache.hpp"
#include "forms/kv_decode.hpp"
