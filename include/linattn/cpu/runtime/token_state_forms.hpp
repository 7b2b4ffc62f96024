// SPDX-License-Identifier: MIT
/// \file
/// recurrent_forward and decode_step of a family whose per-head worker carries the task's state
/// (RLS, mLSTM): Worker<Rule, T, A>::tokens(in, out, b, t0, n, hq, hv, scale) over every
/// sequence, the state read and written by run_head_states. A family's two cells derive from
/// token_state_forms<its worker>.
#pragma once

#include "../../core/options.hpp"
#include "../../core/problem.hpp"
#include "../../core/tensor_view.hpp"
#include "task_runner.hpp"

namespace linattn::cpu {

template <template <class, class, class> class Worker>
struct token_state_forms {
  /// recurrent_forward: from options::initial_state to options::final_state.
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const detail::problem& p) {
    tokens<Rule>(in, out, opt.initial_state, opt.final_state, p);
  }

  /// decode_step: `state` updated in place.
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const tensor_view<state_t<T>, 4>& state, const options<state_t<T>>&, const detail::problem& p) {
    tokens<Rule>(in, out, state, state, p);
  }

 private:
  template <class Rule, class T, class S0, class S1>
  static void tokens(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out, const S0& s_in,
                     const S1& s_out, const detail::problem& p) {
    run_head_states<Worker<Rule, T, state_t<T>>>(in, s_in, s_out, p, 1,
                                                 [&](auto& w, auto... a) { w.tokens(in, out, a...); });
  }
};

}  // namespace linattn::cpu
