// SPDX-License-Identifier: MIT
/// \file
/// The four forms of the mLSTM family on the CPU (docs/math.md#mlstm): recurrent and decode token
/// by token, chunkwise span by span (one chunk at a time, the state carried between), parallel
/// as one span over the whole sequence. State `[N, HV, K, V + 2]` (rules/mlstm.hpp). (Sequence,
/// value head) pairs run on the threads; each is sequential, so results do not depend on the
/// thread count.
#pragma once

#include <algorithm>

#include "../../core/dispatch.hpp"
#include "../../core/family.hpp"
#include "../../core/options.hpp"
#include "../runtime/task_runner.hpp"
#include "../runtime/token_forms.hpp"
#include "worker.hpp"

namespace linattn::detail {

template <form F>
  requires(F == form::recurrent || F == form::decode || F == form::chunkwise)
struct algorithm<mlstm_family, F> : cpu::worker_forms<F, cpu::mlstm_worker> {};

/// The whole sequence as one span (capacity: the longest sequence of the call).
template <>
struct algorithm<mlstm_family, form::parallel> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p) {
    cpu::run_head_states<cpu::mlstm_worker<Rule, T, state_t<T>>>(in, opt.initial_state, opt.final_state, p,
                                                                 std::max<index_t>(1, p.max_length()),
                                                                 [&](auto& w, auto... a) { w.span(in, out, a...); });
  }
};

}  // namespace linattn::detail
