// SPDX-License-Identifier: MIT
/// \file
/// The linear families' cells of the dispatch table on the CPU: recurrent and decode run the
/// token worker; chunkwise runs the block worker once per chunk (with the chunks of one long
/// sequence spread over threads when there are fewer tasks than threads); parallel runs it
/// once over each whole sequence (the masked L x L form, with a float64 gate cumsum since it
/// spans the whole sequence).
#pragma once

#include <algorithm>

#include "../../core/dispatch.hpp"
#include "../../core/options.hpp"
#include "../runtime/schedulers.hpp"
#include "../runtime/token_forms.hpp"
#include "workers.hpp"

namespace linattn::detail {

/// The token worker over every sequence, with the call's checkpoints.
struct linear_tokens {
  template <class Rule, class T, class S0, class S1, class A>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out, const S0& s_in,
                  const S1& s_out, const options<A>& opt, const problem& p) {
    cpu::run_tokens<cpu::token_worker<Rule, T, A>>(in, out, s_in, s_out, p, cpu::checkpoint_writer<A>(opt, p));
  }
};

template <cpu::linear_family Family>
struct algorithm<Family, form::recurrent> : cpu::token_forms<linear_tokens> {};

template <cpu::linear_family Family>
struct algorithm<Family, form::decode> : cpu::token_forms<linear_tokens> {};

template <cpu::linear_family Family>
struct algorithm<Family, form::chunkwise> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p) {
    using A = state_t<T>;
    using worker = cpu::linear_block_worker<Rule, T, A, A>;
    if constexpr (cpu::chunk_local_worker<worker>) {
      if (p.N * p.HV < p.threads && p.max_length() > p.chunk) return cpu::run_chunks_across_threads<worker>(in, out, opt, p);
    }
    cpu::run_blocks<worker>(in, out, opt, p, p.chunk);
  }
};

template <cpu::linear_family Family>
struct algorithm<Family, form::parallel> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p) {
    using worker = cpu::linear_block_worker<Rule, T, state_t<T>, double>;
    cpu::run_blocks<worker>(in, out, opt, p, std::max<index_t>(1, p.max_length()));
  }
};

}  // namespace linattn::detail
