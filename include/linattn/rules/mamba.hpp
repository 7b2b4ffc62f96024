// SPDX-License-Identifier: MIT
/// \file
/// Mamba-1's selective scan, S6 (Gu and Dao 2023), docs/math.md#mamba: a diagonal state space
/// model per channel d (V channels per value head) and state index n (K = the state size N):
///
///   h_t[n, d] = exp(Delta_t[d] A[d, n]) h_{t-1}[n, d] + Delta_t[d] B_t[n] x_t[d]
///   y_t[d]    = (scale sum_n C_t[n] h_t[n, d] + D[d] x_t[d]) silu(z_t[d])   (D, z optional)
///
/// In the library's names q = C, k = B (per token, shared by the value heads of a q/k head: the
/// official module is H = 1), v = x. Delta_t[d] = softplus(dt + dt_bias) with delta_softplus,
/// else dt + dt_bias (then >= 0), like the official selective_scan_fn's delta, delta_bias and
/// delta_softplus. options::scale multiplies C; unset it is 1 (Mamba reads the state with C as
/// it is). State `[N, HV, K, V]`: state(seq, hv, n, d) = h[n, d], the layout of every other
/// rule's S^T with the state index as the key dim (the official last_state [batch, dim, dstate]
/// is its transpose per head). A is `[HV, V, K]`, the official A [dim, dstate] split into heads.
/// Mamba-2 is the special case Delta shared by the channels of a head and A[d, n] = a:
/// ScalarDecay (rules/mamba2.hpp).
#pragma once

#include <cmath>

#include "../core/family.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/tensor_view.hpp"
#include "mamba_checks.hpp"

namespace linattn {

struct Mamba {
  static constexpr const char* name = "Mamba";
  using family = selective_scan_family;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;           // [B, T, H, K]   C_t
    tensor_view<const T, 4> k;           // [B, T, H, K]   B_t
    tensor_view<const T, 4> v;           // [B, T, HV, V]  x_t
    tensor_view<const T, 4> dt;          // [B, T, HV, V]  Delta_t (>= 0), or its pre-softplus value
    coefficient_view<T, 3> A;           // [HV, V, K]     A[d, n] <= 0 (-exp(A_log) in the model)
    coefficient_view<T, 2> D{};         // [HV, V]        optional skip D[d] x_t[d]
    tensor_view<const T, 4> z{};         // [B, T, HV, V]  optional gate: y * silu(z)
    coefficient_view<T, 2> dt_bias{};   // [HV, V]        optional, added to dt (before softplus)
    bool delta_softplus = false;         // Delta = softplus(dt + dt_bias)
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    c.per_channel("dt", in.dt, in.delta_softplus || in.dt_bias.given() ? value_range::any : value_range::nonnegative);
    c.per_channel("z", in.z, value_range::any, false);
  }
  /// A (finite, <= 0), D and dt_bias (rules/mamba_checks.hpp).
  template <class T, class Check>
  static void check_call(const inputs<T>& in, Check& c) {
    detail::check_mamba_call(in, c);
  }

  /// Mamba reads the state with C unscaled: options::scale unset means 1.
  static double default_scale(index_t) { return 1.0; }

  /// Delta_t[d] of token t, value head hv, channel d, in double. Without softplus a negative
  /// dt + dt_bias is clamped to 0 (options::check_finite rejects a negative dt).
  template <class T>
  static double delta(const inputs<T>& in, index_t b, index_t t, index_t hv, index_t d) {
    double x = static_cast<double>(in.dt(b, t, hv, d));
    if (in.dt_bias.given()) x += static_cast<double>(in.dt_bias(hv, d));
    if (in.delta_softplus) return x > 20.0 ? x : std::log1p(std::exp(x));
    return x > 0.0 ? x : 0.0;
  }
  /// A[d, n] of value head hv, in double.
  template <class T>
  static double rate(const inputs<T>& in, index_t hv, index_t d, index_t n) {
    return static_cast<double>(in.A(hv, d, n));
  }
};

}  // namespace linattn
