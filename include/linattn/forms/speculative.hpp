// SPDX-License-Identifier: MIT
/// \file
/// Speculative decoding over a state pool: `verify_drafts<Rule>` runs the draft tokens of every
/// sequence from its pool slot without changing the pool and keeps either the state after each
/// draft token or a compact record of each token's write (draft_record); `commit_drafts` then
/// puts, per sequence, the state after its accepted tokens into its slot (a rollback to any
/// accepted count, 0..drafts, without running the rule again).
#pragma once

#include <string>
#include <type_traits>

#include "../core/commit_checks.hpp"
#include "../core/draft_record.hpp"
#include "../core/error.hpp"
#include "../core/options.hpp"
#include "../core/serving_checks.hpp"
#include "../core/tensor_view.hpp"
#include "../core/validate.hpp"
#include "../core/view_checks.hpp"
#include "../cpu/io/qk_normalization.hpp"
#include "../cpu/linear/draft_algorithms.hpp"
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
  detail::check_verify_options(std::string("linattn::verify_drafts<") + Rule::name + ">", opt, "drafts");
  options<state_t<T>> o = opt;
  o.initial_state = pool;
  o.checkpoint_every = 1;
  o.checkpoints = drafts;
  recurrent_forward<Rule>(in, out, o);
}

/// Verify step with a compact record (core/draft_record.hpp), for the rules with one rank-one
/// write per token (the additive and Householder families): the same inputs, out, pool and
/// options as above, but instead of the states, `record` receives each draft token's write
/// (keys `[N, L, HV, K]`, updates `[N, L, HV, V]`) and log decay (`[N, L, HV, G]`) -- K + V +
/// G numbers per token and head instead of K x V. The pool is read once and nothing of the
/// state size is written; the outputs equal recurrent_forward's up to rounding.
template <rule Rule, class T>
  requires detail::records_drafts<Rule>
void verify_drafts(const std::type_identity_t<typename Rule::template inputs<std::remove_const_t<T>>>& in,
                   tensor_view<T, 4> out, tensor_view<const state_t<T>, 4> pool,
                   const draft_record<state_t<T>>& record, const options<state_t<T>>& opt = {}) {
  using E = std::remove_const_t<T>;
  using A = state_t<T>;
  const std::string fn = std::string("linattn::verify_drafts<") + Rule::name + ">";
  detail::check_verify_options(fn, opt, "record");
  if constexpr (cpu::check_element<E>() && detail::meets_contract<Rule>) {
    options<A> o = opt;
    o.initial_state = pool;
    detail::call_checker<Rule, T, A> checker(detail::form::recurrent, in, o);
    checker.rename(fn);
    const detail::problem p = checker.check(out, nullptr, [&](auto& c) {
      detail::check_draft_record<Rule>(c, record, c.sizes().N, c.sizes().max_length());
    });
    const cpu::qk_normalized<typename Rule::template inputs<E>> qk(in, opt.normalize_qk, opt.threads);
    cpu::verify_with_record<Rule, T>(qk.inputs(), out, pool, record, p);
  }
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
  if (pool.given() && (pool.extent(1) != drafts.extent(2) || pool.extent(2) != drafts.extent(3) ||
                       pool.extent(3) != drafts.extent(4)))
    fail("pool", "has shape " + shape_string(pool.extents()) + ", expected [P, HV, K, V] with HV, K, V of 'drafts' " +
                     shape_string(drafts.extents()));
  if (!detail::fits_index(drafts)) fail("drafts", "has an element count or address reach that overflows a 64-bit index");
  const auto entries = detail::checked_commit(pool, drafts.extent(0), drafts.extent(1), num_accepted, opt,
                                              detail::commit_reads({detail::region_of("drafts", drafts)}, num_accepted, opt),
                                              fail);
  const index_t HV = pool.extent(1), K = pool.extent(2), V = pool.extent(3);
  for (const detail::commit_entry& e : entries)
    for (index_t hv = 0; hv < HV; ++hv)
      for (index_t i = 0; i < K; ++i)
        for (index_t j = 0; j < V; ++j) pool(e.slot, hv, i, j) = drafts(e.seq, e.accepted - 1, hv, i, j);
}

/// Commit step from a compact record: pool(slot) becomes the state after the accepted draft
/// tokens, computed from the slot and the record in one pass over it (core/draft_record.hpp),
/// equal to the plain recurrence up to rounding. Same counts and options as above; the
/// record's views as verify_drafts wrote them. Runs on options::threads threads.
template <class Real>
void commit_drafts(tensor_view<Real, 4> pool, const std::type_identity_t<draft_record<Real>>& record,
                   integer_list_view num_accepted, const std::type_identity_t<options<Real>>& opt = {}) {
  const auto fail = [](const std::string& arg, const std::string& msg) {
    throw error("linattn::commit_drafts: argument '" + arg + "' " + msg);
  };
  detail::check_record_for_pool(record, pool, fail);
  if (opt.threads < 0) fail("options.threads", "is " + std::to_string(opt.threads) + ", expected >= 0 (0 = all cores)");
  const auto entries = detail::checked_commit(pool, record.keys.extent(0), record.keys.extent(1), num_accepted, opt,
                                              detail::commit_reads(detail::record_regions(record), num_accepted, opt), fail);
  cpu::commit_record(pool, record, entries, opt.threads);
}

}  // namespace linattn
