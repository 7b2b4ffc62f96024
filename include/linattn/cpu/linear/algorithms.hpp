// SPDX-License-Identifier: MIT
/// \file
/// The linear families' cells of the dispatch table on the CPU: recurrent and decode run the
/// token worker; chunkwise runs the block worker once per chunk (with the chunks of one long
/// sequence spread over threads when there are fewer tasks than threads); parallel runs it
/// once over each whole sequence (the masked L x L form, with a float64 gate cumsum since it
/// spans the whole sequence). The forms are functions of the rule's inputs and an output (a
/// `[B, T, HV, V]` view, or a Householder product's sub-step output: householder_product.hpp).
#pragma once

#include <algorithm>

#include "../../core/dispatch.hpp"
#include "../../core/options.hpp"
#include "../runtime/schedulers.hpp"
#include "workers.hpp"

namespace linattn::cpu {

/// Form F of the linear families over an output `out` (`state`: decode_step's state, read and
/// written in place).
template <detail::form F, class Rule, class T, class Out>
void linear_form(const typename Rule::template inputs<T>& in, const Out& out, const options<state_t<T>>& opt,
                 const detail::problem& p, const tensor_view<state_t<T>, 4>& state = {}) {
  using A = state_t<T>;
  if constexpr (F == detail::form::recurrent) {
    run_tokens<token_worker<Rule, T, A>>(in, out, opt.initial_state, opt.final_state, p, checkpoint_writer<A>(opt, p));
  } else if constexpr (F == detail::form::decode) {
    run_tokens<token_worker<Rule, T, A>>(in, out, state, state, p, checkpoint_writer<A>(opt, p));
  } else if constexpr (F == detail::form::chunkwise) {
    using worker = linear_block_worker<Rule, T, A, A>;
    if constexpr (chunk_local_worker<worker>) {
      if (p.N * p.HV < p.threads && p.max_length() > p.chunk) return run_chunks_across_threads<worker>(in, out, opt, p);
    }
    run_blocks<worker>(in, out, opt, p, p.chunk);
  } else {
    run_blocks<linear_block_worker<Rule, T, A, double>>(in, out, opt, p, std::max<index_t>(1, p.max_length()));
  }
}

}  // namespace linattn::cpu

namespace linattn::detail {

template <cpu::linear_forward_family Family, form F>
  requires(forward_form(F))
struct algorithm<Family, F> {
  template <class Rule, class T>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<T, 4>& out,
                  const options<state_t<T>>& opt, const problem& p, const tensor_view<state_t<T>, 4>& state = {}) {
    cpu::linear_form<F, Rule, T>(in, out, opt, p, state);
  }
};

}  // namespace linattn::detail
