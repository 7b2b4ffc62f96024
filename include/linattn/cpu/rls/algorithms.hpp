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
  requires(F == form::recurrent || F == form::decode || F == form::chunkwise)
struct algorithm<rls_family, F> : cpu::worker_forms<F, cpu::rls_worker> {};

template <>
struct algorithm<rls_family, form::parallel> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p) {
    cpu::run_head_states<cpu::rls_worker<Rule, T, state_t<T>>>(in, opt.initial_state, opt.final_state, p, 1,
                                                               [&](auto& w, auto... a) { w.normal(in, out, a...); });
  }
};

}  // namespace linattn::detail
