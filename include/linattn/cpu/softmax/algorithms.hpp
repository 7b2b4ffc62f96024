// SPDX-License-Identifier: MIT
/// \file
/// Forms of the nonparametric rules on the CPU: SoftmaxAttention (parallel = direct softmax,
/// chunkwise = online softmax over chunk_size tiles, recurrent = one query row at a time;
/// decode over a kv_cache, forms/kv_decode.hpp) and LocalLinearAttention (parallel). They
/// have no recurrent state, so options::initial_state / final_state are rejected.
#pragma once

#include <algorithm>

#include "../../core/family.hpp"
#include "../../core/options.hpp"
#include "../../core/dispatch.hpp"
#include "workers.hpp"
#include "../runtime/task_runner.hpp"

namespace linattn::detail {

/// Softmax attention over every sequence and value head; `body(worker)` writes the outputs.
template <class Rule, class T, class Body>
void softmax_each_head(const typename Rule::template inputs<T>& in, const problem& p, index_t tile, Body&& body) {
  using A = state_t<T>;
  const index_t cap = std::max<index_t>(1, p.max_length());
  cpu::for_each_head(
      p, [&] { return cpu::softmax_worker<T, A>(cap, p.K, p.V, tile); },
      [&](auto& w, const cpu::head_task& t) {
        w.load(in.q, in.k, in.v, t.b, t.t0, t.n, t.hq, t.hv, static_cast<A>(p.scale));
        body(w, t.b, t.t0, t.hv, p);
      });
}

/// Direct softmax over query tiles of `Tile` rows.
template <index_t Tile>
struct softmax_direct {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>&, const problem& p) {
    softmax_each_head<Rule, T>(in, p, Tile,
                               [&](auto& w, index_t b, index_t t0, index_t hv, const problem&) { w.direct(out, b, t0, hv, Tile); });
  }
};

template <>
struct algorithm<softmax_family, form::parallel> : softmax_direct<64> {};

/// One query row at a time.
template <>
struct algorithm<softmax_family, form::recurrent> : softmax_direct<1> {};

template <>
struct algorithm<softmax_family, form::chunkwise> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>&, const problem& p) {
    softmax_each_head<Rule, T>(in, p, p.chunk,
                               [&](auto& w, index_t b, index_t t0, index_t hv, const problem& p) { w.online(out, b, t0, hv, p.chunk); });
  }
};

template <>
struct algorithm<softmax_family, form::decode> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>&, const tensor_view<T, 4>&, const options<state_t<T>>&,
                  const problem&, const tensor_view<state_t<T>, 4>&) {
    static_assert(always_false<T>,
                  "linattn::decode_step: softmax attention has no matrix state; decode over a "
                  "linattn::kv_cache: decode_step<SoftmaxAttention>(in, out, cache, opt)");
  }
};

template <>
struct algorithm<local_linear_family, form::parallel> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>&, const problem& p) {
    using A = state_t<T>;
    const index_t cap = std::max<index_t>(1, p.max_length());
    cpu::for_each_head(
        p, [&] { return cpu::local_linear_worker<T, A>(cap, p.K, p.V); },
        [&](auto& w, const cpu::head_task& t) {
          w.run(in.q, in.k, in.v, out, t.b, t.t0, t.n, t.hq, t.hv, static_cast<A>(p.scale), static_cast<A>(in.ridge));
        });
  }
};

}  // namespace linattn::detail
