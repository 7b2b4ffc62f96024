// SPDX-License-Identifier: MIT
/// \file
/// The four forms of the RLS family on the CPU (docs/math.md#rls): recurrent and decode by
/// Sherman-Morrison, chunkwise by block Woodbury + Cholesky per chunk, parallel from the
/// normal equations of every prefix. State `[N, HV, K, V + K]` (rules/rls.hpp).
#pragma once

#include "../../core/family.hpp"
#include "../../core/options.hpp"
#include "../../core/dispatch.hpp"
#include "worker.hpp"
#include "../runtime/task_runner.hpp"
#include "../runtime/token_forms.hpp"

namespace linattn::detail {

template <form F>
  requires(forward_form(F))
struct algorithm<rls_family, F> : cpu::worker_forms<F, cpu::rls_worker> {};

}  // namespace linattn::detail
