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
#include "worker.hpp"

namespace linattn::cpu {

/// Runs `body(worker, b, t0, len, hq, hv, scale)` for every (sequence, value head) between
/// loading its state from `s_in` and storing it to `s_out` (slot p.slot(seq) with a state pool);
/// `capacity` tokens per span.
template <class Rule, class T, class A, class S0, class S1, class Body>
void mlstm_each_head(const S0& s_in, const S1& s_out, const detail::problem& p, index_t capacity, Body&& body) {
  for_each_head(
      p, [&] { return mlstm_worker<Rule, T, A>(capacity, p.K, p.V); },
      [&](auto& w, index_t seq, index_t hv) {
        w.load(s_in, p.slot(seq), hv);
        body(w, p.batch(seq), p.start(seq), p.length(seq), p.qk_head(hv), hv, static_cast<A>(p.scale));
        w.store(s_out, p.slot(seq), hv);
      });
}

/// The longest sequence of the call (the parallel form's span).
inline index_t longest_sequence(const detail::problem& p) {
  index_t L = 1;
  for (index_t s = 0; s < p.N; ++s) L = std::max(L, p.length(s));
  return L;
}

}  // namespace linattn::cpu

namespace linattn::detail {

template <>
struct algorithm<mlstm_family, form::recurrent> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p) {
    cpu::mlstm_each_head<Rule, T, state_t<T>>(opt.initial_state, opt.final_state, p, 1,
                                              [&](auto& w, auto... a) { w.tokens(in, out, a...); });
  }
};

template <>
struct algorithm<mlstm_family, form::decode> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const tensor_view<state_t<T>, 4>& state, const options<state_t<T>>&, const problem& p) {
    cpu::mlstm_each_head<Rule, T, state_t<T>>(state, state, p, 1, [&](auto& w, auto... a) { w.tokens(in, out, a...); });
  }
};

template <>
struct algorithm<mlstm_family, form::chunkwise> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p) {
    cpu::mlstm_each_head<Rule, T, state_t<T>>(opt.initial_state, opt.final_state, p, p.chunk,
                                              [&](auto& w, index_t b, index_t t0, index_t len, auto... a) {
                                                for (index_t t = 0; t < len; t += p.chunk)
                                                  w.span(in, out, b, t0 + t, std::min(p.chunk, len - t), a...);
                                              });
  }
};

template <>
struct algorithm<mlstm_family, form::parallel> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p) {
    cpu::mlstm_each_head<Rule, T, state_t<T>>(opt.initial_state, opt.final_state, p, cpu::longest_sequence(p),
                                              [&](auto& w, auto... a) { w.span(in, out, a...); });
  }
};

}  // namespace linattn::detail
