// SPDX-License-Identifier: MIT
/// \file
/// Speculative decoding with a compact record on the CPU: the verify step over every
/// (sequence, value head) with draft_worker, the commit over every written slot with
/// draft_committer, spread over threads (each task writes only its own outputs, record entries
/// or slot, so the results do not depend on the thread count).
#pragma once

#include <vector>

#include "../../core/commit_checks.hpp"
#include "../../core/draft_record.hpp"
#include "../../core/problem.hpp"
#include "../../core/tensor_view.hpp"
#include "../io/draft_commit.hpp"
#include "../runtime/task_runner.hpp"
#include "draft_worker.hpp"

namespace linattn::cpu {

/// verify_drafts of a validated call (problem p).
template <class Rule, class T>
void verify_with_record(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                        const tensor_view<const state_t<T>, 4>& pool, const draft_record<state_t<T>>& record,
                        const detail::problem& p) {
  using A = state_t<T>;
  for_each_head(
      p, [&] { return draft_worker<Rule, T, A>(p.K, p.V); },
      [&](auto& w, const head_task& t) {
        w.run(in, out, pool, record, t.slot, t.seq, t.b, t.t0, t.n, t.hq, t.hv, static_cast<A>(p.scale));
      });
}

/// commit_drafts of checked entries, on `threads` threads (0: all).
template <class A>
void commit_record(const tensor_view<A, 4>& pool, const draft_record<A>& record,
                   const std::vector<detail::commit_entry>& entries, int threads) {
  const index_t HV = pool.extent(1), tasks = index_t(entries.size()) * HV;
  if (tasks == 0) return;
  const int slots = static_cast<int>(std::min<index_t>(detail::resolved_threads(threads), tasks));
  std::vector<draft_committer<A>> workers(static_cast<std::size_t>(slots));
  detail::parallel_for(tasks, slots, [&](index_t i, int s) {
    const detail::commit_entry& e = entries[std::size_t(i / HV)];
    workers[std::size_t(s)].commit(pool, e.slot, i % HV, record, e.seq, e.accepted);
  });
}

}  // namespace linattn::cpu
