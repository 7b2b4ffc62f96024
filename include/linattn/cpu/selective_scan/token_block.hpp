// SPDX-License-Identifier: MIT
/// \file
/// The per-token data of a selective scan (docs/math.md#mamba) for a block of n tokens of one
/// (sequence, value head), read once into contiguous row-major workspaces so that the scans
/// stream them: Delta, x, the write u = Delta ⊙ x, B, C (times the scale), and the output rows,
/// finished with the skip D ⊙ x and the gate silu(z).
#pragma once

#include <cmath>

#include "../../core/tensor_view.hpp"
#include "../io/token_io.hpp"
#include "../linalg/eigen_types.hpp"

namespace linattn::cpu {

template <class Rule, class T, class A>
class selective_scan_tokens {
 public:
  using inputs_t = typename Rule::template inputs<T>;

  /// Workspace for blocks of up to `capacity` tokens.
  selective_scan_tokens(index_t capacity, index_t K, index_t V)
      : delta_(capacity, V), x_(capacity, V), u_(capacity, V), y_(capacity, V), B_(capacity, K), C_(capacity, K),
        skip_(V) {}

  /// Tokens [t0, t0 + n) of batch row b: q/k head hq, value head hv; C times `scale`.
  void read(const inputs_t& in, index_t b, index_t t0, index_t n, index_t hq, index_t hv, A scale) {
    const index_t V = delta_.cols();
    load_qkv_rows(in, b, t0, n, hq, hv, scale, C_, B_, x_);  // C = scale q, B = k, x = v
    for (index_t t = 0; t < n; ++t)
      for (index_t d = 0; d < V; ++d) delta_(t, d) = static_cast<A>(Rule::delta(in, b, t0 + t, hv, d));
    u_.topRows(n).array() = delta_.topRows(n).array() * x_.topRows(n).array();
    y_.topRows(n).setZero();
  }

  /// The skip D[d] of value head hv (zero when D is not given).
  void read_skip(const inputs_t& in, index_t hv) {
    for (index_t d = 0; d < skip_.cols(); ++d) skip_(d) = in.D.given() ? static_cast<A>(in.D(hv, d)) : A(0);
  }

  /// out rows [t0, t0 + n) = (y + D ⊙ x) silu(z).
  void finish(const inputs_t& in, const tensor_view<T, 4>& out, index_t b, index_t t0, index_t n, index_t hv) {
    const index_t V = y_.cols();
    if (in.D.given()) y_.topRows(n).array() += x_.topRows(n).array().rowwise() * skip_.array();
    if (in.z.given())
      for (index_t t = 0; t < n; ++t)
        for (index_t d = 0; d < V; ++d) {
          const double z = static_cast<double>(in.z(b, t0 + t, hv, d));
          y_(t, d) = static_cast<A>(static_cast<double>(y_(t, d)) * (z / (1.0 + std::exp(-z))));
        }
    store_rows(out, b, t0, hv, n, y_.topRows(n));
  }

 protected:
  mat<A> delta_, x_, u_, y_;  // [cap, V]   Delta, x, Delta ⊙ x, output
  mat<A> B_, C_;              // [cap, K]   B, scale C
  row_vec<A> skip_;           // [V]        D of the head
};

}  // namespace linattn::cpu
