// SPDX-License-Identifier: MIT
/// \file
/// Forms of the nonparametric rules on the CPU: SoftmaxAttention (parallel = direct softmax,
/// chunkwise = online softmax over chunk_size tiles, recurrent = one query row at a time;
/// decode over a kv_cache, forms/kv_decode.hpp) and LocalLinearAttention (parallel). They
/// have no recurrent state, so options::initial_state / final_state are rejected.
#pragma once

#include <algorithm>

#include "../core/family.hpp"
#include "../core/options.hpp"
#include "../core/validate.hpp"
#include "../forms/dispatch.hpp"
#include "softmax_kernels.hpp"
#include "task_runner.hpp"

namespace linattn::detail {

/// Validates a call of a stateless rule: no initial or final state.
template <class Rule, class T, class A>
problem check_stateless(form f, const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                        const options<A>& opt) {
  call_checker<Rule, T, A> c(f, in, opt);
  const char* why = "is set, expected none: this rule has no recurrent state (softmax attention decodes over a kv_cache)";
  if (opt.initial_state.given()) c.fail("options.initial_state", why);
  if (opt.final_state.given()) c.fail("options.final_state", why);
  return c.check(out);
}

/// Softmax attention over every sequence and value head; `body(worker)` writes the outputs.
template <class Rule, class T, class Body>
void softmax_each_head(form f, const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                       const options<state_t<T>>& opt, index_t tile, Body&& body) {
  using A = state_t<T>;
  const problem p = check_stateless<Rule, T, A>(f, in, out, opt);
  const index_t cap = std::max<index_t>(1, p.max_length());
  cpu::for_each_head(
      p, [&] { return cpu::softmax_worker<T, A>(cap, p.K, p.V, f == form::chunkwise ? p.chunk : tile); },
      [&](auto& w, index_t seq, index_t hv) {
        const index_t b = p.batch(seq), t0 = p.start(seq);
        w.load(in.q, in.k, in.v, b, t0, p.length(seq), p.qk_head(hv), hv, static_cast<A>(p.scale));
        body(w, b, t0, hv, p);
      });
}

template <>
struct parallel_algorithm<softmax_family> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt) {
    softmax_each_head<Rule, T>(form::parallel, in, out, opt, 64,
                               [&](auto& w, index_t b, index_t t0, index_t hv, const problem&) { w.direct(out, b, t0, hv, 64); });
  }
};

template <>
struct recurrent_algorithm<softmax_family> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt) {
    softmax_each_head<Rule, T>(form::recurrent, in, out, opt, 1,
                               [&](auto& w, index_t b, index_t t0, index_t hv, const problem&) { w.direct(out, b, t0, hv, 1); });
  }
};

template <>
struct chunkwise_algorithm<softmax_family> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt) {
    softmax_each_head<Rule, T>(form::chunkwise, in, out, opt, 0,
                               [&](auto& w, index_t b, index_t t0, index_t hv, const problem& p) { w.online(out, b, t0, hv, p.chunk); });
  }
};

template <>
struct decode_algorithm<softmax_family> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>&, const tensor_view<T, 4>&,
                  const tensor_view<state_t<T>, 4>&, const options<state_t<T>>&) {
    static_assert(always_false<T>,
                  "linattn::decode_step: softmax attention has no matrix state; decode over a "
                  "linattn::kv_cache: decode_step<SoftmaxAttention>(in, out, cache, opt)");
  }
};

template <>
struct parallel_algorithm<local_linear_family> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt) {
    using A = state_t<T>;
    const problem p = check_stateless<Rule, T, A>(form::parallel, in, out, opt);
    const index_t cap = std::max<index_t>(1, p.max_length());
    cpu::for_each_head(
        p, [&] { return cpu::local_linear_worker<T, A>(cap, p.K, p.V); },
        [&](auto& w, index_t seq, index_t hv) {
          w.run(in.q, in.k, in.v, out, p.batch(seq), p.start(seq), p.length(seq), p.qk_head(hv), hv,
                static_cast<A>(p.scale), static_cast<A>(in.ridge));
        });
  }
};

}  // namespace linattn::detail
