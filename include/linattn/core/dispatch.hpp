// SPDX-License-Identifier: MIT
/// \file
/// The dispatch table: `algorithm<Family, Form>` says how a transition family computes a form.
/// The entry points (forms/entry_point.hpp) validate a call once, then run the table's cell:
///
///   forward forms:   algorithm<typename Rule::family, form::chunkwise>::run<Rule>(in, out, opt, problem[, state]);
///   backward forms:  algorithm<typename Rule::family, form::chunkwise_backward>::run<Rule>(in, grad_out, grads, opt, problem);
///
/// where `state` is decode_step's state, read and written in place (the other forward forms read
/// options::initial_state and write options::final_state). Each backend's family folder
/// (cpu/linear/, cpu/ttt/, cpu/rls/, cpu/softmax/, ...) specialises the table for what it
/// implements; a cell nobody specialised fails to compile with the line below naming its form.
/// This header sits at the bottom: it includes only core/ and nothing includes upwards.
#pragma once

#include "family.hpp"
#include "problem.hpp"

namespace linattn::detail {

/// A (family, form) cell of the table: the primary template is the cell no backend fills.
template <class Family, form F>
struct algorithm {
  static_assert(F != form::recurrent || always_false<Family>,
                "linattn::recurrent_forward: no recurrent algorithm exists for this rule's transition family "
                "(Rule::family)");
  static_assert(F != form::parallel || always_false<Family>,
                "linattn::parallel_forward: no parallel algorithm exists for this rule's transition family "
                "(Rule::family)");
  static_assert(F != form::chunkwise || always_false<Family>,
                "linattn::chunkwise_forward: no chunkwise algorithm exists for this rule's transition family "
                "(Rule::family)");
  static_assert(F != form::decode || always_false<Family>,
                "linattn::decode_step: no decode algorithm exists for this rule's transition family "
                "(Rule::family)");
  static_assert(F != form::recurrent_backward || always_false<Family>,
                "linattn::recurrent_backward: no recurrent backward algorithm exists for this rule's transition "
                "family (Rule::family)");
  static_assert(F != form::chunkwise_backward || always_false<Family>,
                "linattn::chunkwise_backward: no chunkwise backward algorithm exists for this rule's transition "
                "family (Rule::family)");
};

}  // namespace linattn::detail
