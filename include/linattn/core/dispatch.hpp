// SPDX-License-Identifier: MIT
/// \file
/// The dispatch table: `algorithm<Family, Form>` says how a transition family computes a form.
/// The entry points (forms/) validate a call once, then run
///
///   algorithm<typename Rule::family, form::chunkwise>::run<Rule>(in, out, opt, problem);
///   algorithm<typename Rule::family, form::decode>::run<Rule>(in, out, state, opt, problem);
///   algorithm<typename Rule::family, form::recurrent_backward>::run<Rule>(in, grad_out, grads, opt, problem);
///
/// Each backend's family folder (cpu/linear/, cpu/ttt/, cpu/rls/, cpu/softmax/) specialises the
/// table for what it implements; a cell nobody specialised fails to compile with the message
/// below. This header sits at the bottom: it includes only core/ and nothing includes upwards.
#pragma once

#include "family.hpp"
#include "problem.hpp"

namespace linattn::detail {

/// A (family, form) cell of the table. The defaults below are the cells no backend fills.
template <class Family, form F>
struct algorithm {
  static_assert(always_false<Family>, "linattn: no algorithm exists for this rule's transition family and form");
};

template <class Family>
struct algorithm<Family, form::recurrent> {
  static_assert(always_false<Family>,
                "linattn::recurrent_forward: no recurrent algorithm exists for this rule's transition family "
                "(Rule::family)");
};

template <class Family>
struct algorithm<Family, form::parallel> {
  static_assert(always_false<Family>,
                "linattn::parallel_forward: no parallel algorithm exists for this rule's transition family "
                "(Rule::family)");
};

template <class Family>
struct algorithm<Family, form::chunkwise> {
  static_assert(always_false<Family>,
                "linattn::chunkwise_forward: no chunkwise algorithm exists for this rule's transition family "
                "(Rule::family)");
};

template <class Family>
struct algorithm<Family, form::decode> {
  static_assert(always_false<Family>,
                "linattn::decode_step: no decode algorithm exists for this rule's transition family "
                "(Rule::family)");
};

template <class Family>
struct algorithm<Family, form::recurrent_backward> {
  static_assert(always_false<Family>,
                "linattn::recurrent_backward: no recurrent backward algorithm exists for this rule's transition "
                "family (Rule::family)");
};

template <class Family>
struct algorithm<Family, form::chunkwise_backward> {
  static_assert(always_false<Family>,
                "linattn::chunkwise_backward: no chunkwise backward algorithm exists for this rule's transition "
                "family (Rule::family)");
};

}  // namespace linattn::detail
