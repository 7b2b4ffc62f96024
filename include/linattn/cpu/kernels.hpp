// SPDX-License-Identifier: MIT
/// \file
/// The CPU kernels a transition family provides. A family that specialises `kernels` with
///   template <class Rule, class T, class A, class Cum> using span = ...;   // chunk / sequence
///   template <class Rule, class T, class A> using tokens = ...;            // token recurrence
/// gets all four forms from the shared drivers (drivers.hpp). A span worker has
///   span(capacity, K, V); load(in, b, t0, n, hq, hv, scale); emit(H, out, b, t0, hv); advance(H)
/// and a token worker tokens(K, V); run(in, out, s_in, s_out, seq, b, t0, n, hq, hv, scale).
#pragma once

namespace linattn::cpu {

template <class Family>
struct kernels {
  static constexpr bool available = false;
};

}  // namespace linattn::cpu
