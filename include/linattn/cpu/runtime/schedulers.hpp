// SPDX-License-Identifier: MIT
/// \file
/// The CPU schedulers: how the (sequence, value head) tasks of a validated call, and the
/// blocks of tokens within them, are spread over threads. They know nothing of the rule's
/// algebra: they run a worker (runtime/worker.hpp) block by block or token by token, and
/// every task sees the same operations in the same order whatever the thread count.
#pragma once

#include <algorithm>
#include <atomic>
#include <tuple>
#include <utility>
#include <vector>

#include "../../core/options.hpp"
#include "../../core/problem.hpp"
#include "../io/checkpoint_io.hpp"
#include "../io/token_io.hpp"
#include "../linalg/eigen_types.hpp"
#include "denormals.hpp"
#include "task_runner.hpp"
#include "thread_pool.hpp"
#include "worker.hpp"

namespace linattn::cpu {

/// (Sequence, value head) tasks advanced together, chunk by chunk: the rows of one token for
/// neighbouring heads are neighbours in memory, so a group reads whole pages and cache-line
/// runs instead of one scattered row per head. Up to this many states ([K, V] each) per thread.
inline constexpr index_t lockstep_heads = 16;

/// Several threads: the sequences advance in windows of about this many tokens (see
/// run_blocks_windowed). Shorter windows balance a call better when another process slows one
/// core (the measurement: bench/README.md, "Design notes moved from the headers").
inline constexpr index_t window_tokens = 256;

/// H[j] <- the state of task first + j (sequence / HV, value head % HV) from its slot of `s`,
/// j in [0, count); store_states writes them back.
template <class S, class A>
void load_states(const S& s, const detail::problem& p, index_t first, index_t count, mat<A>* H) {
  for (index_t j = 0; j < count; ++j) load_state(s, p.slot((first + j) / p.HV), (first + j) % p.HV, H[j]);
}
template <class S, class A>
void store_states(const S& s, const detail::problem& p, index_t first, index_t count, const mat<A>* H) {
  for (index_t j = 0; j < count; ++j) store_state(s, p.slot((first + j) / p.HV), (first + j) % p.HV, H[j]);
}

/// Block [t, t + span) of task i, when its sequence reaches t: the block's outputs from the
/// state H ([K, V]) at its start, H advanced past it, and the checkpoint after it.
template <class Worker, class Inputs, class Out, class A>
void run_block(Worker& s, const Inputs& in, const Out& out, const detail::problem& p,
               const checkpoint_writer<A>& cp, index_t i, index_t t, index_t span, mat<A>& H) {
  const index_t seq = i / p.HV, hv = i % p.HV, len = p.length(seq);
  if (t >= len) return;
  const index_t b = p.batch(seq), t0 = p.start(seq) + t, n = std::min(span, len - t);
  s.load(in, b, t0, n, p.qk_head(hv), hv, static_cast<A>(p.scale));
  s.emit(H, out, b, t0, hv);
  s.advance(H);
  if (cp.active()) cp.after(seq, hv, t + n, len, H);
}

/// run_blocks on several threads. A fixed split (one group of tasks per thread for the whole
/// call) makes the call as slow as its slowest thread: another process on one of the cores
/// held up the end of the call.
/// Here the groups are smaller (at least 2 per thread) and the sequences are cut into
/// windows of window_tokens: unit (window w, group g) runs group g's spans of window w. The
/// threads take units in order (every group of window 0, then of window 1, ...) as they
/// finish the previous one, so a slower thread takes fewer units (with 2 groups per thread,
/// up to 2 x threads - 1 units per unit of the slowest); a unit waits for the same
/// group's previous window (taken `groups` units earlier, so normally done), with no barrier
/// between windows (a barrier per window left one thread idle at every window end). The
/// states ([K, V] per task) live in one shared vector. Each task sees the same operations in
/// the same order as on one thread, so results do not depend on the thread count.
template <block_worker Worker, class Inputs, class Out, class A>
void run_blocks_windowed(const Inputs& in, const Out& out, const options<A>& opt, const detail::problem& p,
                         index_t span) {
  using worker = Worker;
  const index_t tasks = p.N * p.HV;
  // 2 groups per thread (B1 H16 on two threads: 4 groups of 4 heads), not 4 (8 groups of 2):
  // rows of neighbouring heads share pages, which very small groups waste (bench/README.md).
  const index_t group = std::clamp<index_t>(tasks / (2 * static_cast<index_t>(p.threads)), 1, lockstep_heads);
  const index_t groups = (tasks + group - 1) / group, longest = p.max_length();
  const index_t window = std::max<index_t>(1, window_tokens / span) * span;  // whole spans
  const int slots = static_cast<int>(std::min<index_t>(p.threads, groups));
  std::vector<worker> workers;  // one workspace per thread slot
  workers.reserve(static_cast<std::size_t>(slots));
  for (int i = 0; i < slots; ++i) workers.emplace_back(span, p.K, p.V);
  std::vector<mat<A>> H(static_cast<std::size_t>(tasks), mat<A>(p.K, p.V));  // [K, V] per task
  // Unit u = window u / groups of group u % groups. Units are taken in index order, so the
  // window before (taken `groups` units earlier) is done or running.
  const index_t windows = std::max<index_t>(1, (longest + window - 1) / window);
  std::vector<std::atomic<index_t>> done(static_cast<std::size_t>(groups));  // windows finished per group
  const checkpoint_writer<A> cp(opt, p);
  detail::parallel_for(windows * groups, slots, [&](index_t u, int slot) {
    const flush_denormals ftz;
    const index_t g = u % groups, w = u / groups, w0 = w * window;
    const chain_turn turn(done[static_cast<std::size_t>(g)], w);
    turn.wait();
    worker& s = workers[static_cast<std::size_t>(slot)];
    const index_t first = g * group, count = std::min(group, tasks - first);
    if (w == 0) load_states(opt.initial_state, p, first, count, &H[std::size_t(first)]);
    for (index_t t = w0; t < std::min(w0 + window, longest); t += span)
      for (index_t i = first; i < first + count; ++i) run_block(s, in, out, p, cp, i, t, span, H[std::size_t(i)]);
    if (w + 1 == windows) store_states(opt.final_state, p, first, count, &H[std::size_t(first)]);
  });
}

/// Runs every sequence as consecutive blocks of at most `span` tokens. Each task sees the same
/// operations whatever the grouping, so results do not depend on the thread count.
template <block_worker Worker, class Inputs, class Out, class A>
void run_blocks(const Inputs& in, const Out& out, const options<A>& opt, const detail::problem& p,
                index_t span) {
  using worker = Worker;
  const index_t tasks = p.N * p.HV;
  if (p.threads > 1 && tasks > 1) return run_blocks_windowed<Worker>(in, out, opt, p, span);
  const index_t group = std::clamp<index_t>(tasks / std::max(1, p.threads), 1, lockstep_heads);
  const checkpoint_writer<A> cp(opt, p);
  for_each_group(
      p, group,
      [&] {
        return std::pair<worker, std::vector<mat<A>>>(std::piecewise_construct, std::forward_as_tuple(span, p.K, p.V),
                                                      std::forward_as_tuple(group, mat<A>(p.K, p.V)));
      },
      [&](auto& w, index_t first, index_t count) {
        auto& [s, H] = w;  // H[j]: [K, V] state of task first + j
        load_states(opt.initial_state, p, first, count, H.data());
        index_t longest = 0;
        for (index_t j = 0; j < count; ++j) longest = std::max(longest, p.length((first + j) / p.HV));
        for (index_t t = 0; t < longest; t += span)
          for (index_t j = 0; j < count; ++j) run_block(s, in, out, p, cp, first + j, t, span, H[std::size_t(j)]);
        store_states(opt.final_state, p, first, count, H.data());
      });
}

/// Chunks per unit of run_chunks_across_threads: larger units were no faster, and 2 keeps the
/// first state pass's wait and each thread's workspaces short.
inline constexpr index_t window_chunks = 2;

/// Chunkwise form when sequences x value heads < threads: the sequences go in windows of
/// window_chunks chunks, and unit (window w, task i) loads its chunks (the chunk-local work:
/// Gram, T, scores), waits for unit (w - 1, i), then runs the state pass (emit + advance) over
/// them. Free threads take units in order, so while one thread runs the state pass of window
/// w, the next ones load windows w + 1, w + 2, ... into their own workspaces, and each state
/// pass reads chunks its own thread loaded (only the [K, V] state moves between cores). Two
/// earlier designs gained little or lost: alternating a parallel load phase with the state
/// pass, and loading on a fixed other thread (the state pass then read every chunk from the
/// other core's cache). The loads are the smaller part of the work, so more than two threads
/// per task would only wait: at most 2 x tasks threads take part. Every chunk sees exactly the
/// operations of the one-chunk-at-a-time path, so results do not depend on the thread count.
template <chunk_local_worker Worker, class Inputs, class Out, class A>
void run_chunks_across_threads(const Inputs& in, const Out& out, const options<A>& opt,
                               const detail::problem& p) {
  using worker = Worker;
  const index_t tasks = p.N * p.HV, C = p.chunk, window = window_chunks * C;  // window in tokens
  const index_t units = ((p.max_length() + window - 1) / window) * tasks;
  const int slots = static_cast<int>(std::min<index_t>({index_t(p.threads), units, 2 * tasks}));
  std::vector<worker> w;  // [slots, window_chunks]: each thread's loaded chunks
  w.reserve(static_cast<std::size_t>(slots * window_chunks));
  for (index_t j = 0; j < slots * window_chunks; ++j) w.emplace_back(C, p.K, p.V);
  std::vector<mat<A>> H(static_cast<std::size_t>(tasks), mat<A>(p.K, p.V));  // [K, V] per task
  load_states(opt.initial_state, p, 0, tasks, H.data());
  std::vector<std::atomic<index_t>> done(static_cast<std::size_t>(tasks));  // windows finished per task
  const checkpoint_writer<A> cp(opt, p);
  detail::parallel_for(units, slots, [&](index_t u, int slot) {
    const flush_denormals ftz;
    const index_t win = u / tasks, i = u % tasks, seq = i / p.HV, hv = i % p.HV, len = p.length(seq);
    const chain_turn turn(done[std::size_t(i)], win);  // loads first, then wait for the state
    worker* mine = &w[std::size_t(slot * window_chunks)];
    const index_t t0 = win * window, nc = t0 < len ? (std::min(window, len - t0) + C - 1) / C : 0;
    for (index_t c = 0; c < nc; ++c) {
      const index_t t = t0 + c * C;
      mine[c].load(in, p.batch(seq), p.start(seq) + t, std::min(C, len - t), p.qk_head(hv), hv, static_cast<A>(p.scale));
    }
    turn.wait();
    for (index_t c = 0; c < nc; ++c) {
      mine[c].emit(H[std::size_t(i)], out, p.batch(seq), p.start(seq) + t0 + c * C, hv);
      mine[c].advance(H[std::size_t(i)]);
      if (cp.active()) cp.after(seq, hv, std::min(t0 + (c + 1) * C, len), len, H[std::size_t(i)]);
    }
  });
  store_states(opt.final_state, p, 0, tasks, H.data());
}

/// Token recurrence for every sequence; the state comes from s_in and goes to s_out (slot
/// problem::slot of each), the checkpoints to cp.
template <class Worker, class Inputs, class Out, class S0, class S1>
void run_tokens(const Inputs& in, const Out& out, const S0& s_in, const S1& s_out,
                const detail::problem& p, const checkpoint_writer<typename Worker::state_scalar>& cp = {}) {
  using worker = Worker;
  using A = typename Worker::state_scalar;
  for_each_head(
      p, [&] { return worker(p.K, p.V); },
      [&](auto& w, const head_task& t) {
        w.run(in, out, s_in, s_out, t.slot, t.seq, t.b, t.t0, t.n, t.hq, t.hv, static_cast<A>(p.scale), cp);
      });
}

}  // namespace linattn::cpu
