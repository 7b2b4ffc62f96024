// SPDX-License-Identifier: MIT
/// \file
/// TTT-Linear (Sun et al. 2024), docs/math.md#ttt-linear, with the semantics of the official ttt-lm
/// code. The memory is a small model f(x) = x + LN(W^T x + b) (inner LayerNorm with weight gam and
/// bias bet, eps = 1e-6), trained by mini-batch gradient descent on 1/2 ||f(k_t) - v_t||^2 inside
/// the forward pass. For a mini-batch of b tokens with start weights (W_0, b_0) and gradients g_j
/// all taken at the start,
///
///   W_i = W_0 - tau_i sum_{j<=i} c_j k_j g_j^T,   b_i = b_0 - tau_i sum_{j<=i} c_j g_j
///   o_i = q_i + LN(W_i^T q_i + b_i)                 (post-update weights of token i)
///
/// with c_j = eta (per token) and tau_i = tau[i - 1] (default 1/i).
///
/// State layout (per sequence n and value head hv; D = K = V):
///   - W: options::initial_state / final_state `[N, HV, D, D]`, the official W1 (row = input
///     dimension, column = output dimension), i.e. S^T as for every other rule.
///   - b: inputs::initial_bias / final_bias `[N, HV, D]` (default zero; optional output).
///   - a partially trained mini-batch ("cache", docs/math.md#ttt-decode): inputs::initial_cache /
///     final_cache `[N, HV, D + 2, D]`: rows 0..D-1 = sum_j c_j k_j g_j^T (W layout), row D =
///     sum_j c_j g_j, row D + 1 = [i, 0, ..., 0] with i in [0, b) the tokens of the unfinished
///     mini-batch (stored as a number). Missing initial_cache = empty (i = 0).
/// When final_cache is given, final_state / final_bias hold the START weights (W_0, b_0) of
/// the unfinished mini-batch and final_cache its accumulators: feeding all three back
/// continues the sequence exactly, at any split point. Without final_cache they hold the
/// weights after the last token, W_0 - tau_i A (the carry of a complete mini-batch).
///
/// Forms: recurrent_forward = primal form (token by token, running gradient sums);
/// chunkwise_forward = dual form, tiles of options::chunk_size tokens (a multiple of
/// mini_batch) whose mini-batches run in order; parallel_forward = the dual form with one tile
/// per sequence; decode_step = the primal step with W in `state` and b, the cache in
/// initial_/final_bias, initial_/final_cache (final_bias and final_cache are required; pass
/// the same views as initial and final to update in place).
/// Query scale: options::scale multiplies q (also in the residual); unset means 1 here (the
/// official code has no query scale), not 1/sqrt(K).
#pragma once

#include <string>

#include "../core/config.hpp"
#include "../core/family.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/tensor_view.hpp"
#include "ttt_linear_checks.hpp"

namespace linattn {

struct TTTLinear {
  static constexpr const char* name = "TTTLinear";
  using family = ttt_family;
  static constexpr decay_kind decay = decay_kind::none;
  /// Mini-batch size used when inputs::mini_batch is left at its default
  /// (docs/math.md#ttt-mini-batch).
  static constexpr index_t default_mini_batch = 16;
  /// LayerNorm epsilon (official code).
  static constexpr double ln_eps = 1e-6;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;          // [B, T, H, D]
    tensor_view<const T, 4> k;          // [B, T, H, D]
    tensor_view<const T, 4> v;          // [B, T, HV, D]
    coefficient_view<T, 3> eta;        // [B, T, HV] per-token step c_t (eta_base / D * sigmoid(...))
    coefficient_view<T, 2> ln_weight;  // [HV, D] inner LayerNorm weight gam
    coefficient_view<T, 2> ln_bias;    // [HV, D] inner LayerNorm bias bet
    coefficient_view<T, 1> tau{};      // [mini_batch] optional position factors; default 1/i
    index_t mini_batch = default_mini_batch;  // b, 1..max_chunk_size (run-time parameter)
    tensor_view<const state_t<T>, 3> initial_bias{};   // [N, HV, D] optional inner bias b_0
    tensor_view<state_t<T>, 3> final_bias{};           // [N, HV, D] optional output
    tensor_view<const state_t<T>, 4> initial_cache{};  // [N, HV, D + 2, D] optional, see above
    tensor_view<state_t<T>, 4> final_cache{};          // [N, HV, D + 2, D] optional output
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    if (in.v.extent(3) != in.q.extent(3))
      c.fail("v", "has V = " + std::to_string(in.v.extent(3)) + ", expected V = K = " + std::to_string(in.q.extent(3)) +
                      " (the TTT inner model maps R^D to R^D with a residual)");
    c.per_token("eta", in.eta, value_range::any);
  }

  /// Mini-batch, LayerNorm, tau, bias and cache checks (ttt_linear_checks.hpp).
  template <class T, class Check>
  static void check_call(const inputs<T>& in, Check& c) {
    detail::check_ttt_call(in, c);
  }

  /// The official code has no query scale: unset options::scale means 1.
  static double default_scale(index_t) { return 1.0; }

  /// c_t: the step of token t.
  template <class T, class A>
  LINATTN_HOST_DEVICE static A step(const inputs<T>& in, index_t b, index_t t, index_t hv) {
    return static_cast<A>(in.eta(b, t, hv));
  }

  /// tau_i for position i = 1..mini_batch inside the mini-batch.
  template <class T, class A>
  LINATTN_HOST_DEVICE static A tau(const inputs<T>& in, index_t i) {
    return in.tau.given() ? static_cast<A>(in.tau(i - 1)) : A(1) / static_cast<A>(i);
  }
};

}  // namespace linattn
