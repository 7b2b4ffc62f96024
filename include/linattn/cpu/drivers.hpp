// SPDX-License-Identifier: MIT
/// \file
/// The four forms on the CPU, shared by every family that provides `kernels`: recurrent and
/// decode run the family's token recurrence; chunkwise runs its span worker once per chunk;
/// parallel runs it once over each whole sequence (the masked L x L form, with a float64 gate
/// cumsum since it spans the whole sequence).
#pragma once

#include <algorithm>
#include <atomic>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "../core/family.hpp"
#include "../core/options.hpp"
#include "../core/validate.hpp"
#include "../forms/dispatch.hpp"
#include "denormals.hpp"
#include "eigen_types.hpp"
#include "kernels.hpp"
#include "task_runner.hpp"
#include "thread_pool.hpp"
#include "token_io.hpp"

namespace linattn::cpu {

template <class Family>
concept has_kernels = kernels<Family>::available;

/// (Sequence, value head) tasks advanced together, chunk by chunk: the rows of one token for
/// neighbouring heads are neighbours in memory, so a group reads whole pages and cache-line
/// runs instead of one scattered row per head. Up to this many states ([K, V] each) per thread.
inline constexpr index_t lockstep_heads = 16;

/// Several threads: the sequences advance in windows of about this many tokens (see
/// run_spans_windowed).
inline constexpr index_t window_tokens = 1024;

/// run_spans on several threads. A fixed split (one group of tasks per thread for the whole
/// call) makes the call as slow as its slowest thread: another process on one of the cores
/// held up the end of the call (two threads measured 1.56-2.02x one thread on one build).
/// Here the groups are smaller (at least 4 per thread) and the sequences are cut into
/// windows of window_tokens: unit (window w, group g) runs group g's spans of window w. The
/// threads take units in order (every group of window 0, then of window 1, ...) as they
/// finish the previous one, so a slower thread takes fewer units; a unit waits for the same
/// group's previous window (taken `groups` units earlier, so normally done), with no barrier
/// between windows (a barrier per window left one thread idle at every window end: two
/// threads 168-196 ms against 149-177 ms without, B1 T8192 H16, same minutes). The
/// states ([K, V] per task) live in one shared vector. Each task sees the same operations in
/// the same order as on one thread, so results do not depend on the thread count.
template <class Rule, class T, class A, class Cum>
void run_spans_windowed(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                        const options<A>& opt, const detail::problem& p, index_t span) {
  using worker = typename kernels<typename Rule::family>::template span<Rule, T, A, Cum>;
  const index_t tasks = p.N * p.HV;
  const index_t group = std::clamp<index_t>(tasks / (4 * static_cast<index_t>(p.threads)), 1, lockstep_heads);
  const index_t groups = (tasks + group - 1) / group, longest = p.max_length();
  const index_t window = std::max<index_t>(1, window_tokens / span) * span;  // whole spans
  const int slots = static_cast<int>(std::min<index_t>(p.threads, groups));
  std::vector<worker> workers;  // one workspace per thread slot
  workers.reserve(static_cast<std::size_t>(slots));
  for (int i = 0; i < slots; ++i) workers.emplace_back(span, p.K, p.V);
  std::vector<mat<A>> H(static_cast<std::size_t>(tasks), mat<A>(p.K, p.V));  // [K, V] per task
  // Unit u = window u / groups of group u % groups. Units are taken in index order, so the
  // window before (taken `groups` units earlier) is done or running; its thread publishes it
  // in done[g] (also when it throws, so that nobody waits forever).
  const index_t windows = std::max<index_t>(1, (longest + window - 1) / window);
  std::vector<std::atomic<index_t>> done(static_cast<std::size_t>(groups));
  for (auto& d : done) d.store(0);
  detail::parallel_for(windows * groups, slots, [&](index_t u, int slot) {
    const flush_denormals ftz;
    const index_t g = u % groups, w = u / groups, w0 = w * window;
    auto& d = done[static_cast<std::size_t>(g)];
    while (d.load(std::memory_order_acquire) < w) std::this_thread::yield();
    struct publish {
      std::atomic<index_t>& d;
      index_t w;
      ~publish() { d.store(w + 1, std::memory_order_release); }
    } const published{d, w};
    worker& s = workers[static_cast<std::size_t>(slot)];
    const index_t first = g * group, count = std::min(group, tasks - first);
    if (w == 0)
      for (index_t i = first; i < first + count; ++i) load_state(opt.initial_state, i / p.HV, i % p.HV, H[std::size_t(i)]);
    for (index_t t = w0; t < std::min(w0 + window, longest); t += span)
      for (index_t i = first; i < first + count; ++i) {
        const index_t seq = i / p.HV, hv = i % p.HV, len = p.length(seq);
        if (t >= len) continue;
        const index_t b = p.batch(seq), t0 = p.start(seq) + t, n = std::min(span, len - t);
        s.load(in, b, t0, n, p.qk_head(hv), hv, static_cast<A>(p.scale));
        s.emit(H[std::size_t(i)], out, b, t0, hv);
        s.advance(H[std::size_t(i)]);
      }
    if (w + 1 == windows)
      for (index_t i = first; i < first + count; ++i) store_state(opt.final_state, i / p.HV, i % p.HV, H[std::size_t(i)]);
  });
}

/// Runs every sequence as consecutive spans of at most `span` tokens. Each task sees the same
/// operations whatever the grouping, so results do not depend on the thread count.
template <class Rule, class T, class A, class Cum>
void run_spans(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
               const options<A>& opt, const detail::problem& p, index_t span) {
  using worker = typename kernels<typename Rule::family>::template span<Rule, T, A, Cum>;
  const index_t tasks = p.N * p.HV;
  if (p.threads > 1 && tasks > 1) return run_spans_windowed<Rule, T, A, Cum>(in, out, opt, p, span);
  const index_t group = std::clamp<index_t>(tasks / std::max(1, p.threads), 1, lockstep_heads);
  for_each_group(
      p, group,
      [&] {
        return std::pair<worker, std::vector<mat<A>>>(std::piecewise_construct, std::forward_as_tuple(span, p.K, p.V),
                                                      std::forward_as_tuple(group, mat<A>(p.K, p.V)));
      },
      [&](auto& w, index_t first, index_t count) {
        auto& [s, H] = w;  // H[j]: [K, V] state of task first + j
        index_t longest = 0;
        for (index_t j = 0; j < count; ++j) {
          const index_t seq = (first + j) / p.HV, hv = (first + j) % p.HV;
          load_state(opt.initial_state, seq, hv, H[std::size_t(j)]);
          longest = std::max(longest, p.length(seq));
        }
        for (index_t t = 0; t < longest; t += span)
          for (index_t j = 0; j < count; ++j) {
            const index_t seq = (first + j) / p.HV, hv = (first + j) % p.HV, len = p.length(seq);
            if (t >= len) continue;
            const index_t b = p.batch(seq), t0 = p.start(seq) + t, n = std::min(span, len - t);
            s.load(in, b, t0, n, p.qk_head(hv), hv, static_cast<A>(p.scale));
            s.emit(H[std::size_t(j)], out, b, t0, hv);
            s.advance(H[std::size_t(j)]);
          }
        for (index_t j = 0; j < count; ++j)
          store_state(opt.final_state, (first + j) / p.HV, (first + j) % p.HV, H[std::size_t(j)]);
      });
}

/// Span workers whose `load` does enough state-free work to run chunks in parallel.
template <class W>
concept chunk_local_span = W::chunk_local_load;

/// Chunkwise form when sequences x value heads < threads: windows of chunks of every
/// (sequence, value head) are loaded in parallel (the chunk-local work: Gram, T, W, U), then
/// each task's state pass runs over the window's chunks in order. Every chunk sees exactly
/// the operations of the one-chunk-at-a-time path, so results do not depend on the thread count.
template <class Rule, class T, class A>
void run_chunks_across_threads(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                               const options<A>& opt, const detail::problem& p) {
  using worker = typename kernels<typename Rule::family>::template span<Rule, T, A, A>;
  const index_t tasks = p.N * p.HV, C = p.chunk;
  // About four loads per thread per window; memory: tasks * window chunk workspaces.
  const index_t window = (4 * static_cast<index_t>(p.threads) + tasks - 1) / tasks;
  const index_t chunks = (p.max_length() + C - 1) / C;
  std::vector<mat<A>> H(static_cast<std::size_t>(tasks), mat<A>(p.K, p.V));  // [K, V] per task
  std::vector<worker> w;                                                        // [tasks, window]
  w.reserve(static_cast<std::size_t>(tasks * window));
  for (index_t i = 0; i < tasks * window; ++i) w.emplace_back(C, p.K, p.V);
  for (index_t i = 0; i < tasks; ++i) load_state(opt.initial_state, i / p.HV, i % p.HV, H[std::size_t(i)]);
  for (index_t c0 = 0; c0 < chunks; c0 += window) {
    const index_t nc = std::min(window, chunks - c0);
    detail::parallel_for(tasks * nc, p.threads, [&](index_t j, int) {
      const flush_denormals ftz;
      const index_t i = j / nc, c = j % nc, seq = i / p.HV, hv = i % p.HV;
      const index_t t = (c0 + c) * C, len = p.length(seq);
      const index_t n = t < len ? std::min(C, len - t) : 0;
      w[std::size_t(i * window + c)].load(in, p.batch(seq), p.start(seq) + t, n, p.qk_head(hv), hv,
                                          static_cast<A>(p.scale));
    });
    detail::parallel_for(tasks, p.threads, [&](index_t i, int) {
      const flush_denormals ftz;
      const index_t seq = i / p.HV, hv = i % p.HV, len = p.length(seq);
      for (index_t c = 0; c < nc && (c0 + c) * C < len; ++c) {
        worker& s = w[std::size_t(i * window + c)];
        s.emit(H[std::size_t(i)], out, p.batch(seq), p.start(seq) + (c0 + c) * C, hv);
        s.advance(H[std::size_t(i)]);
      }
    });
  }
  for (index_t i = 0; i < tasks; ++i) store_state(opt.final_state, i / p.HV, i % p.HV, H[std::size_t(i)]);
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
    using worker = typename cpu::kernels<Family>::template span<Rule, T, A, A>;
    if constexpr (cpu::chunk_local_span<worker>) {
      if (p.N * p.HV < p.threads && p.max_length() > p.chunk) return cpu::run_chunks_across_threads<Rule, T, A>(in, out, opt, p);
    }
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
