// SPDX-License-Identifier: MIT
/// \file
/// Speculative decoding over a state pool: `verify_drafts<Rule>` runs the draft tokens of every
/// sequence from its pool slot without changing the pool and keeps the state after each draft
/// token; `commit_drafts` then moves, per sequence, the state after its accepted tokens into
/// its slot (a rollback to any accepted count, 0..drafts, without recomputation).
#pragma once

#include <string>
#include <type_traits>

#include "../core/error.hpp"
#include "../core/options.hpp"
#include "../core/serving_checks.hpp"
#include "../core/tensor_view.hpp"
#include "../core/view_checks.hpp"
#include "recurrent.hpp"

namespace linattn {

/// Verify step: inputs `[B, T, ...]` (T draft tokens per sequence) or a packed batch
/// (options::cu_seqlens, B = 1: each sequence its own number of draft tokens), out
/// `[B, T, HV, V]`. Sequence n starts from slot options::state_indices[n] of `pool`
/// (`[P, HV, K, V]`; without state_indices, `[N, HV, K, V]` read per sequence); the pool is
/// not written. `drafts` `[N, L, HV, K, V]` (L = T, or the longest packed sequence) receives
/// the state after each draft token: drafts(n, j) = the state after j + 1 tokens. This is
/// recurrent_forward with options.initial_state = pool, checkpoint_every = 1 and checkpoints =
/// drafts (errors name those options); opt's initial_state, final_state and checkpoints must
/// be unset.
template <rule Rule, class T>
void verify_drafts(const std::type_identity_t<typename Rule::template inputs<std::remove_const_t<T>>>& in,
                   tensor_view<T, 4> out, tensor_view<const state_t<T>, 4> pool, tensor_view<state_t<T>, 5> drafts,
                   const options<state_t<T>>& opt = {}) {
  const std::string fn = std::string("linattn::verify_drafts<") + Rule::name + ">: argument ";
  if (opt.initial_state.given() || opt.final_state.given())
    throw error(fn + "'options.initial_state/final_state' is set, expected none: the states come from 'pool' and "
                     "stay there until commit_drafts");
  if (opt.checkpoints.given() || opt.checkpoint_every != 0)
    throw error(fn + "'options.checkpoints' is set, expected none: the draft states go to 'drafts'");
  options<state_t<T>> o = opt;
  o.initial_state = pool;
  o.checkpoint_every = 1;
  o.checkpoints = drafts;
  recurrent_forward<Rule>(in, out, o);
}

/// Commit step: for every sequence n with a pool slot, pool(slot) = drafts(n, a - 1) with
/// a = num_accepted[n] (0 <= a <= its draft count; a = 0 keeps the slot as it was).
/// `pool` `[P, HV, K, V]`, `drafts` `[N, L, HV, K, V]` from verify_drafts, num_accepted N
/// entries (int32 or int64); opt: the verify call's options (state_indices; cu_seqlens bounds
/// the counts of a packed batch). Throws linattn::error, before writing anything, on a bad
/// argument.
template <class Real>
void commit_drafts(tensor_view<Real, 4> pool, std::type_identity_t<tensor_view<const Real, 5>> drafts,
                   integer_list_view num_accepted, const std::type_identity_t<options<Real>>& opt = {}) {
  const auto fail = [](const std::string& arg, const std::string& msg) {
    throw error("linattn::commit_drafts: argument '" + arg + "' " + msg);
  };
  using detail::shape_string;
  if (!drafts.given() || (drafts.data() == nullptr && drafts.size() > 0))
    fail("drafts", "is missing; expected the [N, L, HV, K, V] states of verify_drafts");
  if (!pool.given() || (pool.data() == nullptr && pool.size() > 0))
    fail("pool", "is missing; expected the [P, HV, K, V] state pool");
  const index_t N = drafts.extent(0), L = drafts.extent(1);
  if (pool.extent(1) != drafts.extent(2) || pool.extent(2) != drafts.extent(3) || pool.extent(3) != drafts.extent(4))
    fail("pool", "has shape " + shape_string(pool.extents()) + ", expected [P, HV, K, V] with HV, K, V of 'drafts' " +
                     shape_string(drafts.extents()));
  if (!detail::fits_index(pool) || !detail::fits_index(drafts))
    fail("pool", "or 'drafts' has an element count or address reach that overflows a 64-bit index");
  // Draft counts per sequence: L, or the lengths of a packed batch.
  detail::sequence_offsets cu(opt.cu_seqlens);
  if (cu.given()) {
    if (cu.size() != N + 1) fail("options.cu_seqlens", "has " + std::to_string(cu.size()) + " entries, expected N + 1 = " + std::to_string(N + 1));
    for (index_t n = 0; n < N; ++n)
      if (cu[n + 1] < cu[n] || cu[n + 1] - cu[n] > L)
        fail("options.cu_seqlens", "gives sequence " + std::to_string(n) + " " + std::to_string(cu[n + 1] - cu[n]) +
                                       " draft tokens, expected 0.." + std::to_string(L) + " (the drafts' L)");
  }
  const auto length = [&](index_t n) { return cu.given() ? cu[n + 1] - cu[n] : L; };
  if (num_accepted.null() && num_accepted.size() > 0) fail("num_accepted", "has null data");
  if (num_accepted.size() != N)
    fail("num_accepted", "has " + std::to_string(num_accepted.size()) + " entries, expected N = " + std::to_string(N));
  const detail::copied_integers accepted(num_accepted);
  for (index_t n = 0; n < N; ++n)
    if (accepted[n] < 0 || accepted[n] > length(n))
      fail("num_accepted", "has entry " + std::to_string(n) + " = " + std::to_string(accepted[n]) + ", expected 0.." +
                               std::to_string(length(n)) + " (the draft tokens of sequence " + std::to_string(n) + ")");
  detail::copied_integers slots;
  if (opt.state_indices.given()) {
    slots = detail::checked_slots(opt.state_indices, "options.state_indices", N, pool.extent(0), "'pool'", fail);
  } else if (pool.extent(0) != N) {
    fail("pool", "has " + std::to_string(pool.extent(0)) + " slots without options.state_indices, expected N = " +
                     std::to_string(N) + " (one per sequence)");
  }
  const detail::memory_region out = detail::region_of("pool", pool);
  if (!out.distinct()) fail("pool", "has strides " + out.stride_string() + " that make distinct elements share memory");
  if (detail::overlaps(out, detail::region_of("drafts", drafts))) fail("pool", "overlaps 'drafts'");
  if (detail::overlaps(out, detail::region_of("num_accepted", num_accepted))) fail("pool", "overlaps 'num_accepted'");
  if (opt.state_indices.given() && detail::overlaps(out, detail::region_of("options.state_indices", opt.state_indices)))
    fail("pool", "overlaps 'options.state_indices'");
  if (cu.given() && detail::overlaps(out, detail::region_of("options.cu_seqlens", opt.cu_seqlens)))
    fail("pool", "overlaps 'options.cu_seqlens'");
  // Everything checked: copy.
  const index_t HV = pool.extent(1), K = pool.extent(2), V = pool.extent(3);
  for (index_t n = 0; n < N; ++n) {
    const index_t slot = slots.given() ? slots[n] : n, a = accepted[n];
    if (slot < 0 || a == 0) continue;
    for (index_t hv = 0; hv < HV; ++hv)
      for (index_t i = 0; i < K; ++i)
        for (index_t j = 0; j < V; ++j) pool(slot, hv, i, j) = drafts(n, a - 1, hv, i, j);
  }
}

}  // namespace linattn
