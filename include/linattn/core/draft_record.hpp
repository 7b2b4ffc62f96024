// SPDX-License-Identifier: MIT
/// \file
/// The compact record of a speculative-decoding verify step (verify_drafts with a
/// `draft_record`): instead of the state after every draft token (K x V numbers per token and
/// head), the rank-one write of each token and its decay, K + V + G numbers. For the rules with
/// one rank-one write per token (the additive and Householder families), the state after
/// draft token j of a sequence (j = 0, 1, ...) is, per value head, with S_0 its pool slot
/// (`[K, V]`), k_i = keys(n, i, hv), u_i = updates(n, i, hv) and g_i = log_decay(n, i, hv):
///
///   S_j = diag(exp(g_0 + ... + g_j)) S_0 + sum_{i <= j} diag(exp(g_{i+1} + ... + g_j)) k_i u_i^T
///
/// commit_drafts evaluates that for the accepted count in one pass over the slot. The sums run
/// forward over the stored log decays (no differences of cumulative sums), so hard resets
/// (log decay -inf, or floored) and strong gates give exact zeros, never NaN.
#pragma once

#include <array>
#include <string>
#include <type_traits>
#include <vector>

#include "config.hpp"
#include "family.hpp"
#include "tensor_view.hpp"
#include "view_checks.hpp"

namespace linattn {

/// Views of a verify step's record (`Real`: the state type). L = draft tokens per sequence
/// (the longest sequence of a packed batch); G = K for a rule with a per-key decay, 1 or K
/// otherwise (with K, the token's decay is repeated over the key rows; a rule without decay
/// writes 0). Entries past a shorter packed sequence's end are left untouched.
template <class Real>
struct draft_record {
  tensor_view<Real, 4> keys{};       ///< `[N, L, HV, K]` the key row of each token's write
  tensor_view<Real, 4> updates{};    ///< `[N, L, HV, V]` the value row written with it
  tensor_view<Real, 4> log_decay{};  ///< `[N, L, HV, G]` the token's log decay (<= 0)
};

namespace detail {

/// Whether verify_drafts can keep a compact record for Rule: one rank-one write per token
/// (the additive and Householder families).
template <class Rule>
inline constexpr bool records_drafts = std::is_same_v<typename Rule::family, additive_family> ||
                                       std::is_same_v<typename Rule::family, householder_family>;

/// The decay width G a record for `Rule` may have: K, or also 1 when the decay is one number.
template <class Rule>
bool record_decay_width_ok(index_t G, index_t K) {
  if constexpr (Rule::decay == decay_kind::vector) return G == K;
  else return G == 1 || G == K;
}

/// Checks a record's views through a call checker (core/validate.hpp) once the call's sizes
/// are known: shapes for N sequences of up to L draft tokens, and registers them as outputs
/// (distinct elements, overlapping nothing else of the call).
template <class Rule, class Checker>
void check_draft_record(Checker& c, const auto& rec, index_t N, index_t L) {
  const auto& p = c.sizes();
  c.expect("record.keys", rec.keys, std::array<index_t, 4>{N, L, p.HV, p.K}, "[N, L, HV, K]");
  c.expect("record.updates", rec.updates, std::array<index_t, 4>{N, L, p.HV, p.V}, "[N, L, HV, V]");
  const bool vector = Rule::decay == decay_kind::vector;
  if (!rec.log_decay.given())
    c.expect("record.log_decay", rec.log_decay, std::array<index_t, 4>{N, L, p.HV, vector ? p.K : 1},
             vector ? "[N, L, HV, K]" : "[N, L, HV, G] (G = 1 or K)");
  const index_t G = rec.log_decay.extent(3);
  if (!record_decay_width_ok<Rule>(G, p.K))
    c.fail("record.log_decay", "has shape " + shape_string(rec.log_decay.extents()) + ", expected [N, L, HV, G] with G = " +
                                   (vector ? "K = " + std::to_string(p.K) + " (a per-key decay)"
                                           : "1 or K = " + std::to_string(p.K)));
  c.expect("record.log_decay", rec.log_decay, std::array<index_t, 4>{N, L, p.HV, G},
           vector ? "[N, L, HV, K]" : "[N, L, HV, G] (G = 1 or K)");
  const std::remove_cvref_t<decltype(rec.keys)> none{};  // outputs with no input they may replace
  c.extra_output("record.keys", rec.keys, none, "");
  c.extra_output("record.updates", rec.updates, none, "");
  c.extra_output("record.log_decay", rec.log_decay, none, "");
}

/// The memory of a record's three views (the overlap checks of commit_drafts).
template <class Real>
std::vector<memory_region> record_regions(const draft_record<Real>& rec) {
  return {region_of("record.keys", rec.keys), region_of("record.updates", rec.updates),
          region_of("record.log_decay", rec.log_decay)};
}

/// commit_drafts's checks of a record against the pool `[P, HV, K, V]`: the three views given,
/// with one N and L, the pool's HV, K and V, and G = 1 or K.
template <class Real, class Fail>
void check_record_for_pool(const draft_record<Real>& rec, const tensor_view<Real, 4>& pool, Fail&& fail) {
  const auto given = [&](const char* name, const tensor_view<Real, 4>& x, const char* shape) {
    if (!x.given() || (x.data() == nullptr && x.size() > 0))
      fail(name, std::string("is missing; expected the ") + shape + " view verify_drafts wrote");
    if (!fits_index(x)) fail(name, "has an element count or address reach that overflows a 64-bit index");
  };
  given("record.keys", rec.keys, "[N, L, HV, K]");
  given("record.updates", rec.updates, "[N, L, HV, V]");
  given("record.log_decay", rec.log_decay, "[N, L, HV, G]");
  if (!pool.given()) return;  // checked_commit names it
  const index_t N = rec.keys.extent(0), L = rec.keys.extent(1), HV = pool.extent(1), K = pool.extent(2),
                V = pool.extent(3), G = rec.log_decay.extent(3);
  const auto want = [&](const char* name, const tensor_view<Real, 4>& x, std::array<index_t, 4> e, const char* sym) {
    if (x.extents() != e)
      fail(name, "has shape " + shape_string(x.extents()) + ", expected " + sym + " = " + shape_string(e) +
                     " (N, L of 'record.keys'; HV, K, V of 'pool' " + shape_string(pool.extents()) + ")");
  };
  want("record.keys", rec.keys, {N, L, HV, K}, "[N, L, HV, K]");
  want("record.updates", rec.updates, {N, L, HV, V}, "[N, L, HV, V]");
  want("record.log_decay", rec.log_decay, {N, L, HV, G == K ? K : 1}, "[N, L, HV, G] (G = 1 or K)");
}

}  // namespace detail

}  // namespace linattn
