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

/// Builds one worker per slot with make(), then calls task(worker, seq, hv) for every
/// sequence and value head. Each task writes only its own outputs and state slice, so the
/// result does not depend on the number of threads.
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
  detail::parallel_for(groups, slots, [&](index_t g, int slot) {
    const flush_denormals ftz;
    task(workers[static_cast<std::size_t>(slot)], g * group, std::min(group, tasks - g * group));
  });
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

template <class Make, class Task>
void for_each_head(const detail::problem& p, Make&& make, Task&& task) {
  for_each_group(p, 1, make, [&](auto& worker, index_t i, index_t) { task(worker, i / p.HV, i % p.HV); });
}


}  // namespace linattn::cpu
