// SPDX-License-Identifier: MIT
/// \file
/// Transition-family tags and the `rule` concept. A rule names its family; the forms dispatch
/// on the family to pick an algorithm, so a new rule in a known family needs no new kernel.
#pragma once

#include <concepts>
#include <type_traits>

namespace linattn {

/// The opt-out of options::checkpoints that several family tags below share
/// (family_has_checkpoints).
struct no_checkpoints {
  static constexpr bool checkpoints = false;
};

/// S_t = decay_t(S_{t-1}) + v_t k_t^T: Hebbian, scalar decay, vector (per-key) decay.
struct additive_family {};
/// S_t = decay_t(S_{t-1}) (I - beta_t k_t k_t^T) + beta_t v_t k_t^T: the delta-rule family.
struct householder_family {};
/// S_t = decay_t(S_{t-1}) prod_j (I - beta_tj k_tj k_tj^T) + writes: n_h Householder steps
/// per token (DeltaProduct). Runs as the Householder family on the interleaved sequence of
/// T n_h sub-steps (cpu/linear/householder_product.hpp): no kernel of its own. A checkpoint
/// every few tokens is not offered (options::checkpoints).
struct householder_product_family : no_checkpoints {};
/// S_t = S_{t-1} (diag(exp(g_t)) + a_t b_t^T) + v_t k_t^T: a diagonal-plus-low-rank
/// transition with free vectors a, b (RWKV-7, the generalised delta rule). Runs through the
/// linear schedulers with a token worker branch and a block worker of its own
/// (cpu/linear/dplr_worker.hpp). No backward pass.
struct dplr_family {};
/// Nonlinear inner model trained by mini-batch gradient descent (TTT). Its state spans three
/// views (weights, bias, mini-batch cache); a state pool indexes all three by the same slot.
/// No checkpoints.
struct ttt_family : no_checkpoints {};
/// Recursive least squares: state (S, P), P the inverse weighted key covariance (RLS). State
/// pools, no checkpoints.
struct rls_family : no_checkpoints {};
/// Exponentially gated matrix memory with a normaliser and a max stabiliser (mLSTM). State
/// pools, no checkpoints.
struct mlstm_family : no_checkpoints {};
/// Diagonal selective state space (Mamba-1, S6): a decay per state element,
/// h_t[n, d] = exp(Delta_t[d] A[d, n]) h_{t-1}[n, d] + Delta_t[d] B_t[n] x_t[d]. The decay
/// depends on both state dims, so it is no rank-1 chunk algebra of the linear families. State
/// pools, no checkpoints.
struct selective_scan_family : no_checkpoints {};
/// Nonparametric regression over all earlier tokens: no matrix state, a KV cache.
struct softmax_family {
  static constexpr bool has_state = false;
};
/// Local-linear (p = 1) attention: softmax weights plus a weighted-regression correction.
struct local_linear_family {
  static constexpr bool has_state = false;
};

/// Whether a family's rules carry a recurrent state (initial_state / final_state); a family
/// tag says `static constexpr bool has_state = false` when they do not.
template <class Family>
inline constexpr bool family_has_state = [] {
  if constexpr (requires { Family::has_state; }) return bool(Family::has_state);
  else return true;
}();

/// Serving features of a family's algorithms (options::state_indices, options::checkpoints);
/// a family tag opts out with `static constexpr bool state_pool = false` or `checkpoints = false`.
template <class Family>
inline constexpr bool family_has_state_pool = [] {
  if constexpr (requires { Family::state_pool; }) return bool(Family::state_pool);
  else return family_has_state<Family>;
}();
template <class Family>
inline constexpr bool family_has_checkpoints = [] {
  if constexpr (requires { Family::checkpoints; }) return bool(Family::checkpoints);
  else return family_has_state<Family>;
}();

/// How a rule forgets: not at all, by one log gate per token and head, or by one per key dim.
enum class decay_kind { none, scalar, vector };

/// What values a rule input may hold (checked by options::check_finite besides finiteness).
enum class value_range { any, log_gate /* <= 0 */, nonnegative /* >= 0 */ };

/// A rule: a policy struct with a name, a family tag and an `inputs<T>` aggregate.
template <class R>
concept rule = requires {
  typename R::family;
  { R::name } -> std::convertible_to<const char*>;
  typename R::template inputs<float>;
};


/// State and accumulation type for an input scalar type (fp32 state for float, fp64 for
/// double; reduced-precision CUDA inputs map to float in the CUDA backend).
template <class T>
struct state_type {
  using type = T;
};
template <class T>
using state_t = typename state_type<T>::type;

namespace detail {
/// Lets a primary template fail with a readable static_assert only when instantiated.
template <class>
inline constexpr bool always_false = false;
}  // namespace detail

}  // namespace linattn
