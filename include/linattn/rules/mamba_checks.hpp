// SPDX-License-Identifier: MIT
/// \file
/// Mamba's checks beyond the common ones (its `check_call` hook, run by core/validate.hpp after
/// the shapes, options and states are validated): the per-head parameters A `[HV, V, K]`, D and
/// dt_bias `[HV, V]`, and A's values (finite and <= 0: a positive rate grows the state without
/// bound; A is small, so it is checked on every call, not only with options::check_finite).
#pragma once

#include <array>
#include <cmath>
#include <string>

#include "../core/config.hpp"
#include "../core/problem.hpp"
#include "../core/view_checks.hpp"

namespace linattn::detail {

/// `c` is the call's checker (core/validate.hpp); `in` Mamba's inputs.
template <class Inputs, class Check>
void check_mamba_call(const Inputs& in, Check& c) {
  const problem& p = c.sizes();
  c.expect("A", in.A, std::array<index_t, 3>{p.HV, p.V, p.K}, "[HV, V, K] (A[d, n] per value head)");
  c.expect("D", in.D, std::array<index_t, 2>{p.HV, p.V}, "[HV, V]", false);
  c.expect("dt_bias", in.dt_bias, std::array<index_t, 2>{p.HV, p.V}, "[HV, V]", false);
  c.extra_input("A", in.A);
  c.extra_input("D", in.D);
  c.extra_input("dt_bias", in.dt_bias);
  for (index_t hv = 0; hv < p.HV; ++hv)
    for (index_t d = 0; d < p.V; ++d)
      for (index_t n = 0; n < p.K; ++n) {
        const double a = static_cast<double>(in.A(hv, d, n));
        if (!(a <= 0.0))  // also NaN
          c.fail("A", "holds " + std::to_string(a) + " at " + shape_string(std::array<index_t, 3>{hv, d, n}) +
                          " ([value head, channel, state]), expected a finite value <= 0 (A = -exp(A_log))");
        if (!std::isfinite(a))
          c.fail("A", "holds " + std::to_string(a) + " at " + shape_string(std::array<index_t, 3>{hv, d, n}) +
                          ", expected a finite value <= 0");
      }
}

}  // namespace linattn::detail
