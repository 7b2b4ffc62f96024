// SPDX-License-Identifier: MIT
/// \file
/// The four forms of the mLSTM family on the CPU (docs/math.md#mlstm): recurrent and decode token
/// by token, chunkwise span by span (one chunk at a time, the state carried between), parallel
/// as one span over the whole sequence. State `[N, HV, K, V + 2]` (rules/mlstm.hpp). (Sequence,
/// value head) pairs run on the threads; each is sequential, so results do not depend on the
/// thread count.
#pragma once

#include "../../core/dispatch.hpp"
#include "../../core/family.hpp"
#include "../../core/options.hpp"
#include "../runtime/task_runner.hpp"
#include "../runtime/token_forms.hpp"
#include "worker.hpp"

namespace linattn::detail {

template <form F>
  requires(forward_form(F))
struct algorithm<mlstm_family, F> : cpu::worker_forms<F, cpu::mlstm_worker> {};

}  // namespace linattn::detail
