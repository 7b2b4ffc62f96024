// SPDX-License-Identifier: MIT
/// \file
/// Per-token coefficients of the linear rules, put in a form that hostile inputs cannot break
/// (docs/math.md#numerical-regimes):
///   - log gates are floored where exp() is already exactly zero in the state type, so a hard
///     reset (a gate of -inf) or a huge gate next to small ones leaves the chunk's cumulative
///     sums finite (the worker sums them in double and rounds each entry once, so small
///     gates beside a huge one keep their precision);
///   - the delta update S += beta (v - S k) k^T is the same with (k/|k|, v/|k|, beta |k|^2),
///     so keys are normalised per token with a norm that cannot overflow, and beta comes from
///     the rule in double: any key norm float can hold gives the exact rule's result.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "../../core/config.hpp"

namespace linattn::cpu {

/// The most negative log gate that still matters in state type A: exp() of anything below
/// underflows to exactly zero (float: e^-104 < 2^-149; double: e^-746 < 2^-1074).
template <class A>
inline constexpr double gate_floor = sizeof(A) == 4 ? -110.0 : -760.0;

/// A log gate as a finite number >= gate_floor<A> (NaN stays NaN).
template <class A, class G>
double floored_gate(G g) {
  const double x = static_cast<double>(g);
  return x < gate_floor<A> ? gate_floor<A> : x;
}

/// Rescales the key row k (and the value row v) of one token to unit norm and returns the
/// matching write strength beta |k|^2, where `beta_of(sqnorm)` is the rule's beta for a key of
/// squared norm `sqnorm` (evaluated in double). A zero or non-finite key is left as it is and
/// gets beta_of(|k|^2) unchanged.
template <class A, class KRow, class VRow, class BetaOf>
A normalise_key(KRow&& k, VRow&& v, BetaOf&& beta_of) {
  const A m = k.cwiseAbs().maxCoeff();
  if (!(m > A(0)) || !std::isfinite(m)) return static_cast<A>(beta_of(static_cast<double>(k.squaredNorm())));
  // One multiply pass each where 1/m and 1/(m s) are normal numbers (every key but the
  // tiniest and the largest); the divisions otherwise, which keep full precision there.
  const A rm = A(1) / m;
  const bool products = std::isnormal(rm);
  const A s = products ? (k * rm).norm() : (k / m).norm();  // in [1, sqrt(K)]: no overflow
  const A r = rm / s;
  if (products && std::isnormal(r)) {
    k *= r;
    v *= r;
  } else {
    k /= m;
    k /= s;
    v /= m;
    v /= s;
  }
  const double norm = static_cast<double>(m) * static_cast<double>(s), sq = norm * norm;
  return static_cast<A>(beta_of(sq) * sq);
}

}  // namespace linattn::cpu
