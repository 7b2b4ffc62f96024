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
#include "workers.hpp"

namespace linattn::detail {

template <cpu::linear_family Family>
struct algorithm<Family, form::recurrent> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p) {
    cpu::run_tokens<cpu::token_worker<Rule, T, state_t<T>>>(in, out, opt.initial_state, opt.final_state, p,
                                                            cpu::checkpoint_writer<state_t<T>>(opt, p));
  }
};

template <cpu::linear_family Family>
struct algorithm<Family, form::decode> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const tensor_view<state_t<T>, 4>& state, const options<state_t<T>>& opt, const problem& p) {
    cpu::run_tokens<cpu::token_worker<Rule, T, state_t<T>>>(in, out, state, state, p, cpu::checkpoint_writer<state_t<T>>(opt, p));
  }
};

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
