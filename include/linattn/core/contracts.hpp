// SPDX-License-Identifier: MIT
/// \file
/// What a rule of each family must provide, as concepts, one per member, so that a rule that
/// lacks one fails with a single line naming it (check_contract, called by every entry point).
///
///   every rule           name, family, inputs<T> (the `rule` concept, core/family.hpp)
///   additive_family      decay; log_gate(in, b, t, hv) for scalar decay,
///                        log_gate(in, b, t, hv, d) for vector decay; optional:
///                        write_scale(in, b, t, hv) (the write c_t v_t k_t^T), and
///                        log_gates(in, b, t, hv, double* g) (all K gates of a token at once)
///                        (cpu/linear/rule_coefficients.hpp)
///   householder_family   decay; beta(in, b, t, hv, key_sqnorm); log_gate(in, b, t, hv) for
///                        scalar decay
///   householder_product_family   decay (none or scalar); beta(in, b, t, j, hv, key_sqnorm)
///                        for sub-step j; log_gate(in, b, t, hv) for scalar decay
///   dplr_family          decay (vector); log_gate(in, b, t, hv, d)
///   ttt_family           step(in, b, t, hv), tau(in, i), ln_eps
///   rls_family           log_gate(in, b, t, hv), state_columns(K, V)
///   selective_scan_family  delta(in, b, t, hv, d) (Delta_t[d] >= 0), rate(in, hv, d, n)
///                        (A[d, n] <= 0), both in double; inputs<T> has views D and z
///                        (cpu/selective_scan/worker.hpp)
///   softmax, local-linear families: nothing beyond `rule`
///
/// A family of your own states its contract the same way (docs/design.md).
#pragma once

#include <concepts>

#include "config.hpp"
#include "family.hpp"

namespace linattn {

namespace contract {

template <class R>
using probe_inputs = typename R::template inputs<float>;

template <class R>
concept decay = requires {
  { R::decay } -> std::convertible_to<decay_kind>;
};
template <class R>
concept scalar_log_gate = requires(const probe_inputs<R>& in, index_t i) {
  { R::log_gate(in, i, i, i) } -> std::convertible_to<float>;
};
template <class R>
concept vector_log_gate = requires(const probe_inputs<R>& in, index_t i) {
  { R::log_gate(in, i, i, i, i) } -> std::convertible_to<float>;
};
template <class R>
concept beta = requires(const probe_inputs<R>& in, index_t i, float sqnorm) {
  { R::beta(in, i, i, i, sqnorm) } -> std::convertible_to<float>;
};
template <class R>
concept step_beta = requires(const probe_inputs<R>& in, index_t i, float sqnorm) {
  { R::beta(in, i, i, i, i, sqnorm) } -> std::convertible_to<float>;
};
template <class R>
concept step = requires(const probe_inputs<R>& in, index_t i) {
  { R::template step<float, float>(in, i, i, i) } -> std::convertible_to<float>;
};
template <class R>
concept tau = requires(const probe_inputs<R>& in, index_t i) {
  { R::template tau<float, float>(in, i) } -> std::convertible_to<float>;
};
template <class R>
concept ln_eps = requires {
  { R::ln_eps } -> std::convertible_to<double>;
};
template <class R>
concept channel_delta = requires(const probe_inputs<R>& in, index_t i) {
  { R::delta(in, i, i, i, i) } -> std::convertible_to<double>;
};
template <class R>
concept state_rate = requires(const probe_inputs<R>& in, index_t i) {
  { R::rate(in, i, i, i) } -> std::convertible_to<double>;
};
template <class R>
concept state_columns = requires(index_t n) {
  { R::state_columns(n, n) } -> std::convertible_to<index_t>;
};

}  // namespace contract

namespace detail {

/// The log gate a rule of the linear families needs for its kind of decay.
template <class Rule>
constexpr bool check_log_gate() {
  if constexpr (Rule::decay == decay_kind::scalar) {
    static_assert(contract::scalar_log_gate<Rule>,
                  "linattn: a rule with decay_kind::scalar needs static T log_gate(const inputs<T>&, index_t b, index_t t, index_t hv)");
    return contract::scalar_log_gate<Rule>;
  } else if constexpr (Rule::decay == decay_kind::vector) {
    static_assert(contract::vector_log_gate<Rule>,
                  "linattn: a rule with decay_kind::vector needs static T log_gate(const inputs<T>&, index_t b, index_t t, index_t hv, index_t d)");
    return contract::vector_log_gate<Rule>;
  }
  return true;
}

/// Fails to compile, with one line naming the missing member, when Rule does not meet its
/// family's contract; returns whether it does (the entry points then skip the algorithm, so
/// that the one line is all the compiler says). Families without a contract here pass.
template <class Rule>
constexpr bool check_contract() {
  using F = typename Rule::family;
  bool ok = true;
  if constexpr (std::same_as<F, additive_family> || std::same_as<F, householder_family> || std::same_as<F, dplr_family>) {
    static_assert(contract::decay<Rule>, "linattn: a linear-family rule needs static constexpr decay_kind decay");
    if constexpr (contract::decay<Rule>) ok = check_log_gate<Rule>();
    else ok = false;
  }
  if constexpr (std::same_as<F, householder_family>) {
    static_assert(contract::beta<Rule>,
                  "linattn: a householder_family rule needs static A beta(const inputs<T>&, index_t b, index_t t, index_t hv, A key_sqnorm)");
    ok = ok && contract::beta<Rule>;
  }
  if constexpr (std::same_as<F, dplr_family>) {
    if constexpr (contract::decay<Rule>) {
      static_assert(Rule::decay == decay_kind::vector, "linattn: a dplr_family rule decays by a per-key gate (decay_kind::vector)");
      ok = ok && Rule::decay == decay_kind::vector;
    }
  }
  if constexpr (std::same_as<F, householder_product_family>) {
    static_assert(contract::decay<Rule>, "linattn: a householder_product_family rule needs static constexpr decay_kind decay");
    if constexpr (contract::decay<Rule>) {
      static_assert(Rule::decay != decay_kind::vector, "linattn: a householder_product_family rule decays by none or a scalar gate");
      ok = Rule::decay != decay_kind::vector && check_log_gate<Rule>();
    } else {
      ok = false;
    }
    static_assert(contract::step_beta<Rule>,
                  "linattn: a householder_product_family rule needs static A beta(const inputs<T>&, index_t b, index_t t, index_t j, index_t hv, A key_sqnorm)");
    ok = ok && contract::step_beta<Rule>;
  }
  if constexpr (std::same_as<F, ttt_family>) {
    static_assert(contract::step<Rule>, "linattn: a ttt_family rule needs static A step<T, A>(const inputs<T>&, index_t b, index_t t, index_t hv)");
    static_assert(contract::tau<Rule>, "linattn: a ttt_family rule needs static A tau<T, A>(const inputs<T>&, index_t i)");
    static_assert(contract::ln_eps<Rule>, "linattn: a ttt_family rule needs static constexpr double ln_eps");
    ok = contract::step<Rule> && contract::tau<Rule> && contract::ln_eps<Rule>;
  }
  if constexpr (std::same_as<F, rls_family>) {
    static_assert(contract::scalar_log_gate<Rule>,
                  "linattn: an rls_family rule needs static T log_gate(const inputs<T>&, index_t b, index_t t, index_t hv)");
    static_assert(contract::state_columns<Rule>, "linattn: an rls_family rule needs static index_t state_columns(index_t K, index_t V)");
    ok = contract::scalar_log_gate<Rule> && contract::state_columns<Rule>;
  }
  if constexpr (std::same_as<F, selective_scan_family>) {
    static_assert(contract::channel_delta<Rule>,
                  "linattn: a selective_scan_family rule needs static double delta(const inputs<T>&, index_t b, index_t t, index_t hv, index_t d)");
    static_assert(contract::state_rate<Rule>,
                  "linattn: a selective_scan_family rule needs static double rate(const inputs<T>&, index_t hv, index_t d, index_t n)");
    ok = contract::channel_delta<Rule> && contract::state_rate<Rule>;
  }
  return ok;
}

/// Whether Rule meets its family's contract (check_contract, asserting on the first miss).
template <class Rule>
inline constexpr bool meets_contract = check_contract<Rule>();

}  // namespace detail

}  // namespace linattn
