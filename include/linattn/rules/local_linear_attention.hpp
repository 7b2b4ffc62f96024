// SPDX-License-Identifier: MIT
/// \file
/// Local-linear ("p = 1") attention, docs/math.md#local-linear-attention (seed paper eq. 52-54):
/// softmax weights w~_i = softmax_i(scale q_t^T k_i) over i <= t, then a weighted linear fit
/// around the query,
///   kbar = sum w~_i k_i,  vbar = sum w~_i v_i,
///   Skk  = sum w~_i (k_i - kbar)(k_i - kbar)^T + ridge I,   Svk = sum w~_i (v_i - vbar)(k_i - kbar)^T,
///   o_t  = vbar + Svk Skk^{-1} (q_t - kbar)
/// (= the intercept of the weighted least-squares fit on [1, k_i - q_t] with the slope ridged).
/// The regression uses the raw query q_t; `scale` enters only the weights. Parallel form only;
/// no state (options::initial_state / final_state are rejected).
#pragma once

#include <cmath>
#include <string>

#include "../core/family.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

struct LocalLinearAttention {
  static constexpr const char* name = "LocalLinearAttention";
  using family = local_linear_family;
  static constexpr decay_kind decay = decay_kind::none;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;  // [B, T, H, K]
    tensor_view<const T, 4> k;  // [B, T, H, K]
    tensor_view<const T, 4> v;  // [B, T, HV, V]
    double ridge = 1e-3;        // > 0: rho, the slope's ridge (Skk is singular for t <= K without it)
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    if (!(std::isfinite(in.ridge) && in.ridge > 0))
      c.fail("ridge", "is " + std::to_string(in.ridge) + ", expected a finite number > 0");
  }
};

}  // namespace linattn
