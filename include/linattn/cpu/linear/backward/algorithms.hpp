// SPDX-License-Identifier: MIT
/// \file
/// The linear families' backward cells of the dispatch table on the CPU (docs/backward.md):
/// recurrent_backward runs the token worker (checkpointed reverse recurrence), chunkwise_backward
/// the chunk worker (chunk-start states, then the chunks in reverse); the tasks are
/// (sequence, q/k head) pairs (scheduler.hpp).
#pragma once

#include "../../../core/backward.hpp"
#include "../../../core/dispatch.hpp"
#include "../workers.hpp"
#include "chunk_backward.hpp"
#include "scheduler.hpp"
#include "token_backward.hpp"
#include "vector_chunk_backward.hpp"

namespace linattn::detail {

template <cpu::linear_family Family, form F>
  requires(!forward_form(F))
struct algorithm<Family, F> {
  template <class Rule, class T, class Grads>
  static void run(const typename Rule::template inputs<T>& in, const tensor_view<const T, 4>& grad_out,
                  const Grads& grads, const backward_options<state_t<T>>& opt, const problem& p) {
    using A = state_t<T>;
    if constexpr (F == form::recurrent_backward)
      cpu::run_backward<cpu::token_backward_worker<Rule, T, A>>(in, grad_out, grads, opt, p);
    else if constexpr (Rule::decay == decay_kind::vector)
      cpu::run_backward<cpu::vector_chunk_backward_worker<Rule, T, A>>(in, grad_out, grads, opt, p);
    else
      cpu::run_backward<cpu::chunk_backward_worker<Rule, T, A>>(in, grad_out, grads, opt, p);
  }
};

}  // namespace linattn::detail
