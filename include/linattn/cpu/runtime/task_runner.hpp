// SPDX-License-Identifier: MIT
/// \file
/// Spreads the independent (sequence, value head) tasks of a validated call over threads.
/// Each thread slot owns one worker (its workspace), built before any output is written.
#pragma once

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "../../core/problem.hpp"
#include "denormals.hpp"
#include "thread_pool.hpp"

namespace linattn::cpu {

/// Like for_each_head, for groups of up to `group` consecutive tasks (task i = sequence
/// i / HV, value head i % HV): calls task(worker, first, count) once per group.
template <class Make, class Task>
void for_each_group(const detail::problem& p, index_t group, Make&& make, Task&& task) {
  const index_t tasks = p.N * p.HV, groups = (tasks + group - 1) / group;
  const int slots = static_cast<int>(std::max<index_t>(1, std::min<index_t>(p.threads, groups)));
  using worker = decltype(make());
  std::vector<worker> workers;
  workers.reserve(static_cast<std::size_t>(slots));
  for (int s = 0; s < slots; ++s) workers.push_back(make());
  detail::parallel_for(
      groups, slots,
      [&](index_t g, int slot) {
        const flush_denormals ftz;
        task(workers[static_cast<std::size_t>(slot)], g * group, std::min(group, tasks - g * group));
      },
      /*affine=*/true);  // repeated calls (decode) keep each head's state on one core
}

/// Unit w of a chain whose units must run one after another (window w of one task or group),
/// on whichever threads take them: wait() returns once unit w - 1 has finished; the destructor
/// marks unit w finished, after waiting its turn, so that a unit that throws neither leaves
/// the next one waiting forever nor lets it run beside an earlier one.
class chain_turn {
 public:
  chain_turn(std::atomic<index_t>& finished, index_t w) : finished_(finished), w_(w) {}
  chain_turn(const chain_turn&) = delete;
  chain_turn& operator=(const chain_turn&) = delete;
  ~chain_turn() {
    wait();
    finished_.store(w_ + 1, std::memory_order_release);
  }
  void wait() const {
    while (finished_.load(std::memory_order_acquire) < w_) std::this_thread::yield();
  }

 private:
  std::atomic<index_t>& finished_;  // units of the chain finished so far
  index_t w_;
};

/// Task i of a validated call: value head hv = i % HV of sequence seq = i / HV, which lives in
/// batch row b, tokens [t0, t0 + n), reads q/k head hq and keeps its state in `slot`
/// (problem::slot: the sequence itself, its pool slot, or negative for none).
struct head_task {
  index_t seq, hv, slot, b, t0, n, hq;
  head_task(const detail::problem& p, index_t i)
      : seq(i / p.HV), hv(i % p.HV), slot(p.slot(seq)), b(p.batch(seq)), t0(p.start(seq)), n(p.length(seq)),
        hq(p.qk_head(hv)) {}
};

/// Builds one worker per slot with make(), then calls task(worker, head_task) for every
/// sequence and value head. Each task writes only its own outputs and state slice, so the
/// result does not depend on the number of threads.
template <class Make, class Task>
void for_each_head(const detail::problem& p, Make&& make, Task&& task) {
  for_each_group(p, 1, make, [&](auto& worker, index_t i, index_t) { task(worker, head_task(p, i)); });
}

/// for_each_head for a worker that carries one task's state between its calls (RLS, mLSTM),
/// built as Worker(in, capacity, K, V): per task w.load(s_in, slot, hv), then
/// body(w, b, t0, n, hq, hv, scale) over the task's tokens, then w.store(s_out, slot, hv).
template <class Worker, class S0, class S1, class Body>
void run_head_states(const typename Worker::inputs_t& in, const S0& s_in, const S1& s_out, const detail::problem& p,
                     index_t capacity, Body&& body) {
  using A = typename Worker::state_scalar;
  for_each_head(
      p, [&] { return Worker(in, capacity, p.K, p.V); },
      [&](Worker& w, const head_task& t) {
        w.load(s_in, t.slot, t.hv);
        body(w, t.b, t.t0, t.n, t.hq, t.hv, static_cast<A>(p.scale));
        w.store(s_out, t.slot, t.hv);
      });
}

/// Calls f(t, m) for the spans [t, t + m) of at most `span` tokens that cover [0, n), in order.
template <class F>
void for_each_span(index_t n, index_t span, F&& f) {
  for (index_t t = 0; t < n; t += span) f(t, std::min(span, n - t));
}

}  // namespace linattn::cpu
