// SPDX-License-Identifier: MIT
/// \file
/// What the Householder rules' chunk backward keeps from its state pass for the reverse pass,
/// for one sequence of L tokens in chunks of C: per token the corrected values U and the
/// corrections' right side X ([L, V]); per chunk of n tokens its inverse M = (I + A)^-1 and
/// masked Gram G ([n, n] blocks of [L, C], rows c0 ..). Written once in pass 1 with
/// non-temporal stores (read once in pass 2, so their cold lines are not fetched first).
#pragma once

#include <algorithm>

#include "../../../core/config.hpp"
#include "../../linalg/eigen_types.hpp"
#include "gradient_io.hpp"

namespace linattn::cpu {

template <class A>
struct kept_corrections {
  mat<A> U, X, M, G;  // [L, V], [L, V], [L, C], [L, C]

  /// Room for a sequence of `len` tokens (grows geometrically, never shrinks).
  void reserve(index_t len, index_t V, index_t C) {
    if (U.rows() >= len) return;
    const index_t rows = std::max(len, U.rows() * 2);
    U.resize(rows, V), X.resize(rows, V), M.resize(rows, C), G.resize(rows, C);
  }

  /// Keeps chunk [c0, c0 + n): its G and M ([n, n]), X and U ([n, V]).
  template <class Gm, class Mm, class Xm, class Um>
  void keep(index_t c0, index_t n, const Gm& g, const Mm& m, const Xm& x, const Um& u) {
    stream_block(G.block(c0, 0, n, n), g), stream_block(M.block(c0, 0, n, n), m);
    stream_block(X.middleRows(c0, n), x), stream_block(U.middleRows(c0, n), u);
  }

  auto values(index_t c0, index_t n) const { return U.middleRows(c0, n); }
  auto rhs(index_t c0, index_t n) const { return X.middleRows(c0, n); }
  auto inverse(index_t c0, index_t n) { return M.block(c0, 0, n, n); }  // addressable: products.hpp takes &M(i, j)
  auto gram(index_t c0, index_t n) const { return G.block(c0, 0, n, n); }
};

}  // namespace linattn::cpu
