// SPDX-License-Identifier: MIT
/// \file
/// Forward cells built from a family's token recurrence: Tokens::run<Rule>(in, out, s_in, s_out,
/// opt, problem) runs every sequence token by token from the state view s_in to s_out, which are
/// options::initial_state and options::final_state in recurrent_forward and decode_step's `state`
/// (in place) in decode. A family's recurrent and decode cells derive from token_forms<F, its
/// Tokens>; a family whose per-head worker carries the task's state takes worker_forms<F, Worker>.
#pragma once

#include "../../core/options.hpp"
#include "../../core/problem.hpp"
#include "../../core/tensor_view.hpp"
#include "task_runner.hpp"

namespace linattn::cpu {

/// recurrent_forward (F = form::recurrent) or decode_step (F = form::decode).
template <detail::form F, class Tokens>
struct token_forms {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const detail::problem& p, const tensor_view<state_t<T>, 4>& state = {}) {
    if constexpr (F == detail::form::decode) Tokens::template run<Rule>(in, out, state, state, opt, p);
    else Tokens::template run<Rule>(in, out, opt.initial_state, opt.final_state, opt, p);
  }
};

/// The Tokens of a family whose per-head worker carries the task's state (RLS, mLSTM, the
/// selective scan): Worker<Rule, T, A>::tokens(in, out, b, t0, n, hq, hv, scale) over every sequence.
template <template <class, class, class> class Worker>
struct worker_tokens {
  template <class Rule, class T, class S0, class S1, class A>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out, const S0& s_in,
                  const S1& s_out, const options<A>&, const detail::problem& p) {
    run_head_states<Worker<Rule, T, A>>(in, s_in, s_out, p, 1, [&](auto& w, auto... a) { w.tokens(in, out, a...); });
  }
};

/// The four forward cells of a family whose per-head worker carries the task's state:
/// recurrent and decode run its tokens (worker_tokens); chunkwise runs
/// Worker<Rule, T, A>::span(in, out, b, t0, n, hq, hv, scale) chunk by chunk (capacity:
/// options::chunk_size), the state carried from one chunk to the next; parallel runs
/// Worker::whole over each whole sequence (capacity: Worker::whole_capacity(longest sequence)).
template <detail::form F, template <class, class, class> class Worker>
struct worker_forms : token_forms<F, worker_tokens<Worker>> {};

template <template <class, class, class> class Worker>
struct worker_forms<detail::form::parallel, Worker> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const detail::problem& p) {
    using W = Worker<Rule, T, state_t<T>>;
    run_head_states<W>(in, opt.initial_state, opt.final_state, p, W::whole_capacity(p.max_length()),
                       [&](auto& w, auto... a) { w.whole(in, out, a...); });
  }
};

template <template <class, class, class> class Worker>
struct worker_forms<detail::form::chunkwise, Worker> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const detail::problem& p) {
    run_head_states<Worker<Rule, T, state_t<T>>>(
        in, opt.initial_state, opt.final_state, p, p.chunk, [&](auto& w, index_t b, index_t t0, index_t n, auto... a) {
          for_each_span(n, p.chunk, [&](index_t t, index_t m) { w.span(in, out, b, t0 + t, m, a...); });
        });
  }
};

}  // namespace linattn::cpu
