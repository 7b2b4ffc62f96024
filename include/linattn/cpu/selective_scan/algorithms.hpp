// SPDX-License-Identifier: MIT
/// \file
/// The four forms of the selective-scan family on the CPU (docs/math.md#mamba): recurrent and
/// decode token by token, chunkwise chunk by chunk (the state carried between), parallel by the
/// T x T form over the whole sequence. State `[N, HV, K, V]` (rules/mamba.hpp). (Sequence, value
/// head) pairs run on the threads; each is sequential, so results do not depend on the thread
/// count.
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
struct algorithm<selective_scan_family, F> : cpu::worker_forms<F, cpu::selective_scan_worker> {};

}  // namespace linattn::detail
