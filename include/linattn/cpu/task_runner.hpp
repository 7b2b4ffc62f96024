// SPDX-License-Identifier: MIT
/// \file
/// Spreads the independent (sequence, value head) tasks of a validated call over threads.
/// Each thread slot owns one worker (its workspace), built before any output is written.
#pragma once

#include <algorithm>
#include <vector>

#include "../core/problem.hpp"
#include "denormals.hpp"
#include "thread_pool.hpp"

namespace linattn::cpu {

/// Builds one worker per slot with make(), then calls task(worker, seq, hv) for every
/// sequence and value head. Each task writes only its own outputs and state slice, so the
/// result does not depend on the number of threads.
template <class Make, class Task>
void for_each_head(const detail::problem& p, Make&& make, Task&& task) {
  const index_t tasks = p.N * p.HV;
  const int slots = static_cast<int>(std::max<index_t>(1, std::min<index_t>(p.threads, tasks)));
  using worker = decltype(make());
  std::vector<worker> workers;
  workers.reserve(static_cast<std::size_t>(slots));
  for (int s = 0; s < slots; ++s) workers.push_back(make());
  detail::parallel_for(tasks, slots, [&](index_t i, int slot) {
    const flush_denormals ftz;
    task(workers[static_cast<std::size_t>(slot)], i / p.HV, i % p.HV);
  });
}

}  // namespace linattn::cpu
