// SPDX-License-Identifier: MIT
/// \file
/// Longhorn as its official code runs it (docs/math.md#longhorn-official): the Householder
/// factor I - eps_t k_t k_t^T of the exact rule (rules/longhorn.hpp) replaced by its diagonal,
///   S_t = S_{t-1} diag(1 - eps_t k_t ⊙ k_t) + eps_t v_t k_t^T,   eps_t = delta_t / (1 + delta_t ||k_t||^2),
/// a per-key decay computed from the key and delta plus a scaled write: an additive-family rule
/// with vector decay, run by the vector-decay kernels (no kernel of its own). The official
/// module's channels are value heads of V = 1 sharing one key head (docs/math.md#longhorn-official).
#pragma once

#include "../core/family.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/tensor_view.hpp"
#include "../core/vector_math.hpp"

namespace linattn {

struct LonghornDiagonal {
  static constexpr const char* name = "LonghornDiagonal";
  using family = additive_family;
  static constexpr decay_kind decay = decay_kind::vector;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;      // [B, T, H, K]
    tensor_view<const T, 4> k;      // [B, T, H, K]
    tensor_view<const T, 4> v;      // [B, T, HV, V]
    coefficient_view<T, 3> delta;  // [B, T, HV] >= 0 (the official sigmoid(dt + bias))
  };

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    c.per_token("delta", in.delta, value_range::nonnegative);
  }

  /// eps_t = delta_t / (1 + delta_t ||k_t||^2) of token t for value head hv, in double.
  template <class T>
  static double epsilon(const inputs<T>& in, index_t b, index_t t, index_t hv) {
    const double kk = squared_norm(&in.k(b, t, key_head(in, hv), 0), in.k.stride(3), in.k.extent(3));
    const double delta = static_cast<double>(in.delta(b, t, hv));
    return delta / (1.0 + delta * kk);
  }

  /// log(1 - eps_t k_{t,d}^2): in (-inf, 0] since eps_t k_{t,d}^2 <= eps_t ||k_t||^2 < 1.
  template <class T>
  static double log_gate(const inputs<T>& in, index_t b, index_t t, index_t hv, index_t d) {
    const double x = static_cast<double>(in.k(b, t, key_head(in, hv), d));
    return log1p_nonpositive(-epsilon(in, b, t, hv) * x * x);
  }
  /// All K log gates of token t at once (one key norm per token instead of one per gate; the
  /// logs in a loop of their own, which compiles to SIMD code).   g: [K]
  template <class T>
  static void log_gates(const inputs<T>& in, index_t b, index_t t, index_t hv, double* g) {
    const double eps = epsilon(in, b, t, hv);
    const index_t h = key_head(in, hv), K = in.k.extent(3);
    for (index_t d = 0; d < K; ++d) {
      const double x = static_cast<double>(in.k(b, t, h, d));
      g[d] = -eps * x * x;
    }
    for (index_t d = 0; d < K; ++d) g[d] = log1p_nonpositive(g[d]);
  }
  /// The write eps_t v_t k_t^T.
  template <class T>
  static double write_scale(const inputs<T>& in, index_t b, index_t t, index_t hv) {
    return epsilon(in, b, t, hv);
  }

 private:
  /// The q/k head that value head hv reads (grouped value heads).
  template <class T>
  static index_t key_head(const inputs<T>& in, index_t hv) {
    return hv / (in.v.extent(2) / in.k.extent(2));
  }
};

}  // namespace linattn
