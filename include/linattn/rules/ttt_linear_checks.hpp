// SPDX-License-Identifier: MIT
/// \file
/// TTTLinear's checks beyond the common ones (its `check_call` hook, run by core/validate.hpp
/// after the shapes, options and states are validated): the mini-batch and chunk sizes, the
/// LayerNorm parameters, tau, the bias and cache views (shapes, pools, in-place pairs,
/// overlaps) and the cache's position entries. (K == V is checked by TTTLinear::check_inputs.)
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/problem.hpp"
#include "../core/view_checks.hpp"

namespace linattn::detail {

/// `c` is the call's checker (core/validate.hpp); `in` TTTLinear's inputs.
template <class Inputs, class Check>
void check_ttt_call(const Inputs& in, Check& c) {
  const problem& p = c.sizes();
  const index_t D = p.K, N = p.N, HV = p.HV, mb = in.mini_batch;
  if (mb < 1 || mb > max_chunk_size)
    c.fail("mini_batch", "is " + std::to_string(mb) + ", expected 1.." + std::to_string(max_chunk_size));
  if (c.call_form() == form::chunkwise && c.opts().chunk_size % mb != 0)
    c.fail("options.chunk_size", "is " + std::to_string(c.opts().chunk_size) +
                                     ", expected a multiple of the mini-batch size mini_batch = " + std::to_string(mb));
  c.expect("ln_weight", in.ln_weight, std::array<index_t, 2>{HV, D}, "[HV, D]");
  c.expect("ln_bias", in.ln_bias, std::array<index_t, 2>{HV, D}, "[HV, D]");
  c.expect("tau", in.tau, std::array<index_t, 1>{mb}, "[mini_batch]", false);
  // With a state pool (options::state_indices) the bias and cache views are pools as well,
  // indexed by the same slots as the weights: any number of slots that holds every index.
  const bool pooled = p.slots.given();
  index_t needed = 0;  // slots a pool view must hold
  for (index_t n = 0; pooled && n < N; ++n) needed = std::max(needed, p.slot(n) + 1);
  const auto lead = [&](const auto& x) { return pooled && x.given() ? x.extent(0) : N; };
  const auto pool_view = [&](const char* name, const auto& x, const std::string& shape) {
    constexpr std::size_t rank = std::decay_t<decltype(x)>::rank;
    std::array<index_t, rank> want{lead(x), HV, D};
    if constexpr (rank == 4) want = {lead(x), HV, D + 2, D};
    const std::string text = pooled ? "[P, " + shape + "] (a pool of P slots: options.state_indices)" : "[N, " + shape + "]";
    c.expect(name, x, want, text.c_str(), false);
    if (x.given() && x.extent(0) < needed)
      c.fail(name, "has " + std::to_string(x.extent(0)) + " slots, expected at least " + std::to_string(needed) +
                       " (options.state_indices holds " + std::to_string(needed - 1) + ")");
  };
  pool_view("initial_bias", in.initial_bias, "HV, D");
  pool_view("final_bias", in.final_bias, "HV, D");
  pool_view("initial_cache", in.initial_cache, "HV, D + 2, D");
  pool_view("final_cache", in.final_cache, "HV, D + 2, D");
  if (c.call_form() == form::decode) {
    if (!in.final_bias.given())
      c.fail("final_bias", "is missing; decode_step<TTTLinear> writes the inner bias there (pass the same view as initial_bias to update in place)");
    if (!in.final_cache.given())
      c.fail("final_cache", "is missing; decode_step<TTTLinear> carries the unfinished mini-batch there (pass the same view as initial_cache to update in place)");
  }
  c.extra_input("ln_weight", in.ln_weight);
  c.extra_input("ln_bias", in.ln_bias);
  c.extra_input("tau", in.tau);
  c.pool_input("initial_bias", in.initial_bias);
  c.pool_input("initial_cache", in.initial_cache);
  c.extra_output("final_bias", in.final_bias, in.initial_bias, "initial_bias");
  c.extra_output("final_cache", in.final_cache, in.initial_cache, "initial_cache");
  // The position entry of every carried cache (of the slots read) is an integer in [0, mini_batch).
  if (!in.initial_cache.given()) return;
  for (index_t n = 0; n < N; ++n) {
    const index_t slot = p.slot(n);
    if (slot < 0) continue;
    for (index_t hv = 0; hv < HV; ++hv) {
      const double pos = static_cast<double>(in.initial_cache(slot, hv, D + 1, 0));
      if (!(pos >= 0 && pos < double(mb) && pos == std::floor(pos)))
        c.fail("initial_cache", "holds position " + std::to_string(pos) + " at [" + std::to_string(slot) + ", " +
                                    std::to_string(hv) + ", D + 1, 0], expected an integer in [0, mini_batch = " +
                                    std::to_string(mb) + ")");
    }
  }
}

}  // namespace linattn::detail
