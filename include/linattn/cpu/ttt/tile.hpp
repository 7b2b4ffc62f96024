// SPDX-License-Identifier: MIT
/// \file
/// One (sequence, value head)'s rows of a tile of tokens, as the TTT dual form reads and writes
/// them (docs/math.md#ttt-mini-batch): scaled queries, keys, targets v - k and steps in, outputs
/// out, row r = token t0 + r. Rows move one token at a time so that a driver can fill the tiles of
/// several heads token by token, in the callers' memory order ([B, T, H, D]: the heads of one token
/// are adjacent), which the hardware prefetcher streams.
#pragma once

#include <type_traits>

#include "../../core/tensor_view.hpp"
#include "../io/token_io.hpp"
#include "../linalg/eigen_types.hpp"
#include "../linalg/gemm.hpp"

namespace linattn::cpu {

template <class A>
struct ttt_tile {
  mat<A> Q, K, Y, O;  // [cap, D] scaled queries, keys, targets v - k, outputs
  col_vec<A> c;       // [cap]    steps

  ttt_tile(index_t cap, index_t D) : Q(cap, D), K(cap, D), Y(cap, D), O(cap, D), c(cap) {}

  /// Row r <- token t of batch row b, q/k head hq, value head hv.
  template <class Rule, class T>
  void load_row(const typename Rule::template inputs<T>& in, index_t r, index_t b, index_t t, index_t hq, index_t hv,
                A scale) {
    load_row(r, &in.q(b, t, hq, 0), &in.k(b, t, hq, 0), &in.v(b, t, hv, 0), in.q.stride(3), in.k.stride(3),
             in.v.stride(3), Rule::template step<T, A>(in, b, t, hv), scale);
  }

  /// Row r <- the rows at q, k, v (element strides dq, dk, dv), step c_r. (Drivers that walk
  /// a tile pass row pointers: the views' four-term index products cost more than the copy.)
  template <class T>
  void load_row(index_t r, const T* q, const T* k, const T* v, index_t dq, index_t dk, index_t dv, A c_r, A scale) {
    c(r) = c_r;
    A *Qr = &Q(r, 0), *Kr = &K(r, 0), *Yr = &Y(r, 0);
    const index_t D = Q.cols();
    index_t d = 0;
    if constexpr (std::is_same_v<T, A>) {
      if (dq == 1 && dk == 1 && dv == 1) {  // one vectorised pass over the three rows
        using namespace Eigen::internal;
        using P = typename packet_of<A>::type;
        constexpr index_t W = packet_of<A>::size;
        const P s = pset1<P>(scale);
        for (; d + W <= D; d += W) {
          const P kd = ploadu<P>(k + d);
          pstoreu(Qr + d, pmul(s, ploadu<P>(q + d)));
          pstoreu(Kr + d, kd);
          pstoreu(Yr + d, psub(ploadu<P>(v + d), kd));
        }
      }
    }
    for (; d < D; ++d) {
      Qr[d] = scale * static_cast<A>(q[d * dq]);
      Kr[d] = static_cast<A>(k[d * dk]);
      Yr[d] = static_cast<A>(v[d * dv]) - Kr[d];  // target v - k
    }
  }

  /// out(b, t, hv, :) <- row r of O.
  template <class T>
  void store_row(const tensor_view<T, 4>& out, index_t r, index_t b, index_t t, index_t hv) const {
    store_row(r, &out(b, t, hv, 0), out.stride(3));
  }

  /// The row at dst (element stride sd) <- row r of O.
  template <class T>
  void store_row(index_t r, T* dst, index_t sd) const {
    const index_t D = O.cols();
    const A* src = &O(r, 0);
    index_t d = 0;
    if constexpr (std::is_same_v<T, A>) {
      if (sd == 1) {
        using P = typename packet_of<A>::type;
        for (; d + packet_of<A>::size <= D; d += packet_of<A>::size)
          Eigen::internal::pstoreu(dst + d, Eigen::internal::ploadu<P>(src + d));
      }
    }
    for (; d < D; ++d) dst[d * sd] = static_cast<T>(src[d]);
  }

  /// Requests the q, k, v rows of token t into the cache (contiguous rows only).
  template <class Inputs>
  static void prefetch_row(const Inputs& in, index_t b, index_t t, index_t hq, index_t hv) {
    prefetch(in.q, b, t, hq, false);
    prefetch(in.k, b, t, hq, false);
    prefetch(in.v, b, t, hv, false);
  }

  /// Requests out(b, t, hv, :) into the cache for writing (contiguous rows only).
  template <class T>
  static void prefetch_out_row(const tensor_view<T, 4>& out, index_t b, index_t t, index_t hv) {
    prefetch(out, b, t, hv, true);
  }

 private:
  template <class X>
  static void prefetch(const X& x, index_t b, index_t t, index_t h, bool write) {
    if (x.stride(3) == 1) prefetch_bytes(&x(b, t, h, 0), x.extent(3) * index_t(sizeof(x(b, t, h, 0))), write);
  }
};

}  // namespace linattn::cpu
