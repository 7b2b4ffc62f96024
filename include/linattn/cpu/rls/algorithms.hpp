// SPDX-License-Identifier: MIT
/// \file
/// The four forms of the RLS family on the CPU (docs/math.md#rls): recurrent and decode by
/// Sherman-Morrison, chunkwise by block Woodbury + Cholesky per chunk, parallel from the
/// normal equations of every prefix. State `[N, HV, K, V + K]` (rules/rls.hpp).
#pragma once

#include <algorithm>

#include "../../core/family.hpp"
#include "../../core/options.hpp"
#include "../../core/dispatch.hpp"
#include "worker.hpp"
#include "../runtime/task_runner.hpp"

namespace linattn::cpu {

/// Runs `body(worker, b, t0, len, hq, hv, scale)` for every (sequence, value head) between
/// loading the state from `s_in` and storing it to `s_out`.
template <class Rule, class T, class A, class S0, class S1, class Body>
void rls_each_head(const typename Rule::template inputs<T>& in, const S0& s_in, const S1& s_out,
                   const detail::problem& p, index_t capacity, Body&& body) {
  for_each_head(
      p, [&] { return rls_worker<Rule, T, A>(capacity, p.K, p.V); },
      [&](auto& w, index_t seq, index_t hv) {
        w.load(s_in, p.slot(seq), hv, in.delta);
        body(w, p.batch(seq), p.start(seq), p.length(seq), p.qk_head(hv), hv, static_cast<A>(p.scale));
        w.store(s_out, p.slot(seq), hv);
      });
}

}  // namespace linattn::cpu

namespace linattn::detail {

template <>
struct algorithm<rls_family, form::recurrent> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p) {
    using A = state_t<T>;
    cpu::rls_each_head<Rule, T, A>(in, opt.initial_state, opt.final_state, p, 1,
                                   [&](auto& w, auto... a) { w.tokens(in, out, a...); });
  }
};

template <>
struct algorithm<rls_family, form::decode> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const tensor_view<state_t<T>, 4>& state, const options<state_t<T>>&, const problem& p) {
    using A = state_t<T>;
    cpu::rls_each_head<Rule, T, A>(in, state, state, p, 1, [&](auto& w, auto... a) { w.tokens(in, out, a...); });
  }
};

template <>
struct algorithm<rls_family, form::chunkwise> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p) {
    using A = state_t<T>;
    cpu::rls_each_head<Rule, T, A>(in, opt.initial_state, opt.final_state, p, p.chunk,
                                   [&](auto& w, index_t b, index_t t0, index_t len, auto... a) {
                                     for (index_t t = 0; t < len; t += p.chunk)
                                       w.chunk(in, out, b, t0 + t, std::min(p.chunk, len - t), a...);
                                   });
  }
};

template <>
struct algorithm<rls_family, form::parallel> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p) {
    using A = state_t<T>;
    cpu::rls_each_head<Rule, T, A>(in, opt.initial_state, opt.final_state, p, 1,
                                   [&](auto& w, auto... a) { w.normal(in, out, a...); });
  }
};

}  // namespace linattn::detail
