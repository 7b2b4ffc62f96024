// SPDX-License-Identifier: MIT
/// \file
/// The checks of every commit_drafts (full draft states or a compact record, CPU or CUDA):
/// draft counts, accepted counts, pool slots, and that the pool overlaps nothing the call
/// reads. They run before anything is written and return what to write.
#pragma once

#include <string>
#include <vector>

#include "options.hpp"
#include "problem.hpp"
#include "serving_checks.hpp"
#include "tensor_view.hpp"
#include "view_checks.hpp"

namespace linattn::detail {

/// One slot a commit writes: the pool slot of sequence seq and its accepted count (>= 1).
struct commit_entry {
  index_t seq, slot, accepted;
};

/// The regions a commit reads besides the drafts (`views`): num_accepted and the option lists.
template <class Real>
std::vector<memory_region> commit_reads(std::vector<memory_region> views, const integer_list_view& num_accepted,
                                        const options<Real>& opt) {
  if (num_accepted.given() && !num_accepted.null()) views.push_back(region_of("num_accepted", num_accepted));
  if (opt.state_indices.given() && !opt.state_indices.null())
    views.push_back(region_of("options.state_indices", opt.state_indices));
  if (opt.cu_seqlens.given() && !opt.cu_seqlens.null()) views.push_back(region_of("options.cu_seqlens", opt.cu_seqlens));
  return views;
}

/// Checks a commit of N sequences of up to L draft tokens into `pool` (`[P, HV, K, V]`):
/// options::cu_seqlens (N + 1 offsets, each sequence 0..L tokens) bounds each sequence's count,
/// num_accepted holds N counts in 0..its draft tokens, options::state_indices N pool slots
/// (without it, P = N). `reads` are the regions of the views the commit reads (the drafts or
/// the record, num_accepted and the option lists, as the caller holds them); the pool must
/// have distinct elements and overlap none of them. Returns the slots to write.
template <class Real, class Fail>
std::vector<commit_entry> checked_commit(const tensor_view<Real, 4>& pool, index_t N, index_t L,
                                         const integer_list_view& num_accepted, const options<Real>& opt,
                                         const std::vector<memory_region>& reads, Fail&& fail) {
  if (!pool.given() || (pool.data() == nullptr && pool.size() > 0))
    fail("pool", "is missing; expected the [P, HV, K, V] state pool");
  if (!fits_index(pool)) fail("pool", "has an element count or address reach that overflows a 64-bit index");
  sequence_offsets cu(opt.cu_seqlens);
  if (cu.given()) {
    if (cu.size() != N + 1)
      fail("options.cu_seqlens", "has " + std::to_string(cu.size()) + " entries, expected N + 1 = " + std::to_string(N + 1));
    for (index_t n = 0; n < N; ++n)
      if (cu[n + 1] < cu[n] || cu[n + 1] - cu[n] > L)
        fail("options.cu_seqlens", "gives sequence " + std::to_string(n) + " " + std::to_string(cu[n + 1] - cu[n]) +
                                       " draft tokens, expected 0.." + std::to_string(L) + " (the drafts' L)");
  }
  const auto length = [&](index_t n) { return cu.given() ? cu[n + 1] - cu[n] : L; };
  if (num_accepted.null() && num_accepted.size() > 0) fail("num_accepted", "has null data");
  if (num_accepted.size() != N)
    fail("num_accepted", "has " + std::to_string(num_accepted.size()) + " entries, expected N = " + std::to_string(N));
  const copied_integers accepted(num_accepted);
  for (index_t n = 0; n < N; ++n)
    if (accepted[n] < 0 || accepted[n] > length(n))
      fail("num_accepted", "has entry " + std::to_string(n) + " = " + std::to_string(accepted[n]) + ", expected 0.." +
                               std::to_string(length(n)) + " (the draft tokens of sequence " + std::to_string(n) + ")");
  copied_integers slots;
  if (opt.state_indices.given()) {
    slots = checked_slots(opt.state_indices, "options.state_indices", N, pool.extent(0), "'pool'", fail);
  } else if (pool.extent(0) != N) {
    fail("pool", "has " + std::to_string(pool.extent(0)) + " slots without options.state_indices, expected N = " +
                     std::to_string(N) + " (one per sequence)");
  }
  const memory_region out = region_of("pool", pool);
  if (!out.distinct()) fail("pool", "has strides " + out.stride_string() + " that make distinct elements share memory");
  for (const memory_region& r : reads)
    if (overlaps(out, r)) fail("pool", std::string("overlaps '") + r.name + "'");
  std::vector<commit_entry> entries;
  for (index_t n = 0; n < N; ++n) {
    const index_t slot = slots.given() ? slots[n] : n;
    if (slot >= 0 && accepted[n] > 0) entries.push_back({n, slot, accepted[n]});
  }
  return entries;
}

}  // namespace linattn::detail
