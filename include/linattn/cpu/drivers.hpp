// SPDX-License-Identifier: MIT
/// \file
/// The four forms on the CPU, shared by every family that provides `kernels`: recurrent and
/// decode run the family's token recurrence; chunkwise runs its span worker once per chunk;
/// parallel runs it once over each whole sequence (the masked L x L form, with a float64 gate
/// cumsum since it spans the whole sequence).
#pragma once

#include <algorithm>
#include <tuple>
#include <utility>

#include "../core/family.hpp"
#include "../core/options.hpp"
#include "../core/validate.hpp"
#include "../forms/dispatch.hpp"
#include "kernels.hpp"
#include "task_runner.hpp"

namespace linattn::cpu {

template <class Family>
concept has_kernels = kernels<Family>::available;

/// Runs every sequence as consecutive spans of at most `span` tokens.
template <class Rule, class T, class A, class Cum>
void run_spans(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
               const options<A>& opt, const detail::problem& p, index_t span) {
  using worker = typename kernels<typename Rule::family>::template span<Rule, T, A, Cum>;
  for_each_head(
      p,
      [&] {
        return std::pair<worker, mat<A>>(std::piecewise_construct, std::forward_as_tuple(span, p.K, p.V),
                                         std::forward_as_tuple(p.K, p.V));
      },
      [&](auto& w, index_t seq, index_t hv) {
        auto& [s, H] = w;  // H: [K, V] state of this (sequence, value head)
        load_state(opt.initial_state, seq, hv, H);
        const index_t b = p.batch(seq), t0 = p.start(seq), len = p.length(seq);
        for (index_t t = 0; t < len; t += span) {
          const index_t n = std::min(span, len - t);
          s.load(in, b, t0 + t, n, p.qk_head(hv), hv, static_cast<A>(p.scale));
          s.emit(H, out, b, t0 + t, hv);
          s.advance(H);
        }
        store_state(opt.final_state, seq, hv, H);
      });
}

/// Token recurrence for every sequence; the state comes from s_in and goes to s_out.
template <class Rule, class T, class A, class S0, class S1>
void run_tokens(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                const S0& s_in, const S1& s_out, const detail::problem& p) {
  using worker = typename kernels<typename Rule::family>::template tokens<Rule, T, A>;
  for_each_head(
      p, [&] { return worker(p.K, p.V); },
      [&](auto& w, index_t seq, index_t hv) {
        w.run(in, out, s_in, s_out, seq, p.batch(seq), p.start(seq), p.length(seq), p.qk_head(hv), hv,
              static_cast<A>(p.scale));
      });
}

}  // namespace linattn::cpu

namespace linattn::detail {

template <class Family>
  requires cpu::has_kernels<Family>
struct recurrent_algorithm<Family> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt) {
    using A = state_t<T>;
    const problem p = call_checker<Rule, T, A>(form::recurrent, in, opt).check(out);
    cpu::run_tokens<Rule, T, A>(in, out, opt.initial_state, opt.final_state, p);
  }
};

template <class Family>
  requires cpu::has_kernels<Family>
struct decode_algorithm<Family> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const tensor_view<state_t<T>, 4>& state, const options<state_t<T>>& opt) {
    using A = state_t<T>;
    const problem p = call_checker<Rule, T, A>(form::decode, in, opt).check(out, &state);
    cpu::run_tokens<Rule, T, A>(in, out, state, state, p);
  }
};

template <class Family>
  requires cpu::has_kernels<Family>
struct chunkwise_algorithm<Family> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt) {
    using A = state_t<T>;
    const problem p = call_checker<Rule, T, A>(form::chunkwise, in, opt).check(out);
    cpu::run_spans<Rule, T, A, A>(in, out, opt, p, p.chunk);
  }
};

template <class Family>
  requires cpu::has_kernels<Family>
struct parallel_algorithm<Family> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt) {
    using A = state_t<T>;
    const problem p = call_checker<Rule, T, A>(form::parallel, in, opt).check(out);
    cpu::run_spans<Rule, T, A, double>(in, out, opt, p, std::max<index_t>(1, p.max_length()));
  }
};

}  // namespace linattn::detail
