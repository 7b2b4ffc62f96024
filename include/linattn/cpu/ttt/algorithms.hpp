// SPDX-License-Identifier: MIT
/// \file
/// The four forms of the TTT family on the CPU (docs/math.md#ttt-forms): recurrent = primal
/// form, chunkwise = dual form in tiles of options::chunk_size tokens (a multiple of the
/// mini-batch), parallel = dual form with one tile per sequence, decode = primal step with the
/// cache of docs/math.md#ttt-decode.
/// Each (sequence, value head) carries a ttt_state through its tokens.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "../../core/family.hpp"
#include "../../core/options.hpp"
#include "../../core/dispatch.hpp"
#include "../runtime/task_runner.hpp"
#include "../runtime/token_forms.hpp"
#include "dual.hpp"
#include "primal.hpp"
#include "state.hpp"

namespace linattn::cpu {

/// Runs every (sequence, value head) of a validated call: loads its state (from the sequence's
/// pool slot with options::state_indices), lets the thread's kernel run its tokens, stores the
/// state. `w_in` / `w_out`: views of W.
template <class Rule, class T, class A, class Make, class WIn, class WOut>
void run_ttt(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out, const WIn& w_in,
             const WOut& w_out, const detail::problem& p, Make&& make_kernel) {
  for_each_head(
      p, [&] { return std::pair(make_kernel(), ttt_state<A>(p.K)); },
      [&](auto& w, const head_task& t) {
        auto& [kernel, st] = w;
        st.load(in, w_in, t.slot, t.hv);
        kernel.run(in, out, st, t.b, t.t0, t.n, t.hq, t.hv, static_cast<A>(p.scale));
        st.store(in, w_out, t.slot, t.hv, Rule::template tau<T, A>(in, std::max<index_t>(st.pos, 1)));
      });
}

/// Dual form over tiles of at most `tile` tokens (the tile only sets how many rows are
/// loaded at once: the mini-batches of a sequence run in order across tiles).
template <class Rule, class T, class A>
class ttt_tiles {
 public:
  ttt_tiles(const typename Rule::template inputs<T>& in, index_t tile, index_t D) : tile_(tile), dual_(in, tile, D) {}
  void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out, ttt_state<A>& st, index_t b,
           index_t t0, index_t n, index_t hq, index_t hv, A scale) {
    for_each_span(n, tile_, [&](index_t t, index_t m) { dual_.run(in, out, st, b, t0 + t, m, hq, hv, scale); });
  }

 private:
  index_t tile_;
  ttt_dual<Rule, T, A> dual_;
};

/// The dual form over tiles of `tile` tokens, for groups of consecutive (sequence, value head)
/// tasks: every task of a group runs its tile i before any runs its tile i + 1. The rows of
/// one head are D values every H * D, so one head on its own streams q, k, v and out with a
/// large stride (TLB- and latency-bound); instead the group's tiles are filled and drained
/// token by token, all heads of a token together, in memory order ([tile, H, D] blocks that
/// the hardware prefetcher streams; software prefetches of the next tile, in one burst or
/// spread over the compute, measured slower than none). Each task keeps its own state and
/// tile rows; the kernel's workspaces are shared. One group per worker (a group never spans more heads than a sequence has), so
/// with several threads the heads still spread over the workers. The results are those of
/// run_ttt.
template <class Rule, class T, class A, class WIn, class WOut>
void run_ttt_interleaved(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out, const WIn& w_in,
                         const WOut& w_out, const detail::problem& p, index_t tile) {
  const index_t tasks = p.N * p.HV;
  const index_t slots = std::max<index_t>(1, std::min<index_t>(p.threads, tasks));
  const index_t group = std::max<index_t>(1, std::min<index_t>(p.HV, tasks / slots));
  const A scale = static_cast<A>(p.scale);
  struct worker {
    ttt_dual<Rule, T, A> dual;
    std::vector<ttt_state<A>> states;
    std::vector<ttt_tile<A>> tiles;
    struct rows_at {
      const T *q, *k, *v;
      T* o;
    };
    std::vector<rows_at> at;  // per task: its rows of the current tile's first token
  };
  for_each_group(
      p, group,
      [&] {
        return worker{ttt_dual<Rule, T, A>(in, tile, p.K), std::vector<ttt_state<A>>(group, ttt_state<A>(p.K)),
                      std::vector<ttt_tile<A>>(group, ttt_tile<A>(tile, p.K)),
                      std::vector<typename worker::rows_at>(group)};
      },
      [&](worker& w, index_t first, index_t count) {
        const auto seq = [&](index_t i) { return (first + i) / p.HV; };
        const auto hv = [&](index_t i) { return (first + i) % p.HV; };
        index_t longest = 0;
        for (index_t i = 0; i < count; ++i) {
          w.states[i].load(in, w_in, p.slot(seq(i)), hv(i));
          longest = std::max(longest, p.length(seq(i)));
        }
        const auto rows = [&](index_t t, index_t i) {  // task i's rows in the tile at t
          return std::clamp<index_t>(p.length(seq(i)) - t, 0, tile);
        };
        // Row pointers of each task's first token in the tile; rows follow at the token strides.
        const index_t tq = in.q.stride(1), tk = in.k.stride(1), tv = in.v.stride(1), to = out.stride(1);
        for (index_t t = 0; t < longest; t += tile) {
          for (index_t i = 0; i < count; ++i)
            if (rows(t, i) > 0) {
              const index_t b = p.batch(seq(i)), t0 = p.start(seq(i)) + t, hq = p.qk_head(hv(i));
              w.at[i] = {&in.q(b, t0, hq, 0), &in.k(b, t0, hq, 0), &in.v(b, t0, hv(i), 0), &out(b, t0, hv(i), 0)};
            }
          for (index_t r = 0; r < tile; ++r)
            for (index_t i = 0; i < count; ++i)
              if (r < rows(t, i))
                w.tiles[i].load_row(r, w.at[i].q + r * tq, w.at[i].k + r * tk, w.at[i].v + r * tv, in.q.stride(3),
                                    in.k.stride(3), in.v.stride(3),
                                    Rule::template step<T, A>(in, p.batch(seq(i)), p.start(seq(i)) + t + r, hv(i)),
                                    scale);
          for (index_t i = 0; i < count; ++i) w.dual.compute(w.states[i], w.tiles[i], rows(t, i));
          for (index_t r = 0; r < tile; ++r)
            for (index_t i = 0; i < count; ++i)
              if (r < rows(t, i)) w.tiles[i].store_row(r, w.at[i].o + r * to, out.stride(3));
        }
        for (index_t i = 0; i < count; ++i) {
          auto& st = w.states[i];
          st.store(in, w_out, p.slot(seq(i)), hv(i), Rule::template tau<T, A>(in, std::max<index_t>(st.pos, 1)));
        }
      });
}

}  // namespace linattn::cpu

namespace linattn::detail {

/// The primal form over every sequence (recurrent_forward, and decode_step with the cache of
/// docs/math.md#ttt-decode).
struct ttt_primal_tokens {
  template <class Rule, class T, class S0, class S1, class A>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out, const S0& w_in,
                  const S1& w_out, const options<A>&, const problem& p) {
    cpu::run_ttt<Rule, T, A>(in, out, w_in, w_out, p, [&] { return cpu::ttt_primal<Rule, T, A>(p.K); });
  }
};

template <form F>
  requires(F == form::recurrent || F == form::decode)
struct algorithm<ttt_family, F> : cpu::token_forms<F, ttt_primal_tokens> {};

template <>
struct algorithm<ttt_family, form::chunkwise> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p) {
    using A = state_t<T>;
    cpu::run_ttt_interleaved<Rule, T, A>(in, out, opt.initial_state, opt.final_state, p, p.chunk);
  }
};

/// The "parallel" form of TTT is the dual form with the whole sequence as one tile (there is
/// no L x L form for a nonlinear inner model, docs/math.md#ttt-forms).
template <>
struct algorithm<ttt_family, form::parallel> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p) {
    using A = state_t<T>;
    const index_t tile = std::max<index_t>(1, p.max_length());
    cpu::run_ttt<Rule, T, A>(in, out, opt.initial_state, opt.final_state, p,
                             [&] { return cpu::ttt_tiles<Rule, T, A>(in, tile, p.K); });
  }
};

}  // namespace linattn::detail
