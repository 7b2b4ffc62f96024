// SPDX-License-Identifier: MIT
/// \file
/// Checks of the serving options shared by every call that takes them (the forms through
/// validate.hpp, commit_drafts): pool slots (options::state_indices) and the checkpoint layout.
/// Each check throws through the caller's `fail(argument, message)` before anything is written.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "config.hpp"
#include "error.hpp"
#include "options.hpp"
#include "problem.hpp"

namespace linattn::detail {

/// Copies the N pool slots of `indices` (argument `arg`) and checks them: N entries, each
/// negative (no slot) or in [0, P) for a pool of P slots (`pool` names the pool view), the
/// non-negative ones distinct.
template <class Fail>
copied_integers checked_slots(const integer_list_view& indices, const char* arg, index_t N, index_t P,
                              const std::string& pool, Fail&& fail) {
  if (indices.null() && indices.size() > 0) fail(arg, "has null data");
  if (indices.size() != N)
    fail(arg, "has " + std::to_string(indices.size()) + " entries, expected N = " + std::to_string(N) +
                  " (one pool slot per sequence)");
  copied_integers slots(indices);  // the one read of the caller's entries
  std::vector<std::pair<index_t, index_t>> used;  // (slot, sequence)
  for (index_t n = 0; n < N; ++n) {
    const index_t s = slots[n];
    if (s < 0) continue;
    if (s >= P)
      fail(arg, "has entry " + std::to_string(n) + " = " + std::to_string(s) + ", expected a slot in 0.." +
                    std::to_string(P - 1) + " of " + pool + " (P = " + std::to_string(P) +
                    ") or a negative entry (no slot)");
    used.emplace_back(s, n);
  }
  std::sort(used.begin(), used.end());
  for (std::size_t i = 1; i < used.size(); ++i)
    if (used[i].first == used[i - 1].first)
      fail(arg, "has entries " + std::to_string(used[i - 1].second) + " and " + std::to_string(used[i].second) +
                    " both = " + std::to_string(used[i].first) + ", expected distinct slots (one sequence per slot)");
  return slots;
}

/// verify_drafts (`fn`, e.g. "linattn::verify_drafts<GatedDelta>") reads its states from the pool
/// and writes the draft states or record to `target`: the state and checkpoint options must be
/// unset.
template <class Real>
void check_verify_options(const std::string& fn, const options<Real>& opt, const char* target) {
  if (opt.initial_state.given() || opt.final_state.given())
    throw error(fn + ": argument 'options.initial_state/final_state' is set, expected none: the states come from "
                     "'pool' and stay there until commit_drafts");
  if (opt.checkpoints.given() || opt.checkpoint_every != 0)
    throw error(fn + ": argument 'options.checkpoints' is set, expected none: the draft tokens go to '" + target + "'");
}

/// Checkpoint entries per sequence: ceil(L / every), L the (longest) sequence length.
inline index_t checkpoint_entries(index_t L, index_t every) { return every > 0 ? (L + every - 1) / every : 0; }

/// The checkpoint entry holding the state after `done` tokens of a sequence of `length`
/// tokens, or -1 when that state is not a checkpoint (done is neither a multiple of `every`
/// nor the sequence's end).
inline index_t checkpoint_entry(index_t done, index_t length, index_t every) {
  if (every <= 0 || done <= 0 || (done % every != 0 && done != length)) return -1;
  return (done - 1) / every;
}

}  // namespace linattn::detail
