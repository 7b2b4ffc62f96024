// SPDX-License-Identifier: MIT
/// \file
/// The per-token coefficients the linear workers ask a rule for, with the optional members of
/// the additive family's contract (core/contracts.hpp) filled in:
///
///   write_scale(in, b, t, hv)        c_t of the write c_t v_t k_t^T (default 1)
///   log_gates(in, b, t, hv, g)       vector decay: all K log gates of token t at once, into
///                                    g[0:K) (default: log_gate(in, b, t, hv, d) per d)
///
/// A rule whose per-key gates share work (Longhorn's diagonal rule: one key norm per token)
/// computes them together through log_gates instead of once per key dimension.
#pragma once

#include "../../core/config.hpp"

namespace linattn::cpu {

/// Whether Rule scales its write (S_t = decay(S_{t-1}) + c_t v_t k_t^T).
template <class Rule, class In>
inline constexpr bool scales_write = requires(const In& in, index_t i) { Rule::write_scale(in, i, i, i); };

/// c_t of token t of batch row b for value head hv (1 for a rule without write_scale).
template <class Rule, class A, class In>
A write_coefficient(const In& in, index_t b, index_t t, index_t hv) {
  if constexpr (scales_write<Rule, In>) return static_cast<A>(Rule::write_scale(in, b, t, hv));
  else return A(1);
}

/// g[d] = log gate of key dimension d at token t (d in [0, K)), in double.   g: [K]
template <class Rule, class In>
void vector_log_gates(const In& in, index_t b, index_t t, index_t hv, index_t K, double* g) {
  if constexpr (requires { Rule::log_gates(in, b, t, hv, g); }) {
    Rule::log_gates(in, b, t, hv, g);
  } else {
    for (index_t d = 0; d < K; ++d) g[d] = static_cast<double>(Rule::log_gate(in, b, t, hv, d));
  }
}

}  // namespace linattn::cpu
