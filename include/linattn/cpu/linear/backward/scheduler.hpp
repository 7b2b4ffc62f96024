// SPDX-License-Identifier: MIT
/// \file
/// Spreads the backward pass over threads. A task is one (sequence, q/k head): it runs the
/// backward of the head's value heads one after another, in order, so that the sums of dq and
/// dk over grouped value heads are taken in the same order whatever the thread count (results
/// are bit-identical for any options::threads). Each thread slot owns one worker (workspaces
/// and state checkpoints), built before any output is written.
///
/// A worker W(chunk, K, V) provides
///   run(in, grad_out, grads, opt, problem, seq, hq, hv, add)   the backward of one value head;
///                                                              add: dq, dk rows are added
#pragma once

#include <algorithm>
#include <vector>

#include "../../../core/backward.hpp"
#include "../../../core/problem.hpp"
#include "../../runtime/denormals.hpp"
#include "../../runtime/thread_pool.hpp"

namespace linattn::cpu {

template <class Worker, class Inputs, class T, class Grads, class A>
void run_backward(const Inputs& in, const tensor_view<const T, 4>& grad_out, const Grads& grads,
                  const backward_options<A>& opt, const detail::problem& p) {
  const index_t tasks = p.N * p.H;
  const int slots = static_cast<int>(std::max<index_t>(1, std::min<index_t>(p.threads, tasks)));
  std::vector<Worker> workers;
  workers.reserve(static_cast<std::size_t>(slots));
  for (int s = 0; s < slots; ++s) workers.emplace_back(p.chunk, p.K, p.V);
  detail::parallel_for(tasks, slots, [&](index_t i, int slot) {
    const flush_denormals ftz;
    const index_t seq = i / p.H, hq = i % p.H;
    Worker& w = workers[static_cast<std::size_t>(slot)];
    for (index_t j = 0; j < p.group; ++j) w.run(in, grad_out, grads, opt, p, seq, hq, hq * p.group + j, j > 0);
  });
}

}  // namespace linattn::cpu
