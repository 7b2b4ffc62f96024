// SPDX-License-Identifier: MIT
/// \file
/// One (sequence, value head)'s rows of a tile of tokens, as the TTT dual form reads and
/// writes them (MATH.md §6.4): scaled queries, keys, targets v - k and steps in, outputs out,
/// row r = token t0 + r. Rows move one token at a time so that a driver can fill the tiles of
/// several heads token by token, in the callers' memory order ([B, T, H, D]: the heads of
/// one token are adjacent), which the hardware prefetcher streams.
#pragma once

#include <type_traits>

#include "../core/tensor_view.hpp"
#include "eigen_types.hpp"
#include "small_gemm.hpp"

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
    c(r) = Rule::template step<T, A>(in, b, t, hv);
    if constexpr (std::is_same_v<T, A>) {
      if (in.q.stride(3) == 1 && in.k.stride(3) == 1 && in.v.stride(3) == 1) {  // one pass over the three rows
        using namespace Eigen::internal;
        using P = typename packet_of<A>::type;
        constexpr index_t W = packet_of<A>::size;
        const A *q = &in.q(b, t, hq, 0), *k = &in.k(b, t, hq, 0), *v = &in.v(b, t, hv, 0);
        A *Qr = &Q(r, 0), *Kr = &K(r, 0), *Yr = &Y(r, 0);
        const P s = pset1<P>(scale);
        const index_t D = Q.cols();
        index_t d = 0;
        for (; d + W <= D; d += W) {
          const P kd = ploadu<P>(k + d);
          pstoreu(Qr + d, pmul(s, ploadu<P>(q + d)));
          pstoreu(Kr + d, kd);
          pstoreu(Yr + d, psub(ploadu<P>(v + d), kd));
        }
        for (; d < D; ++d) {
          Qr[d] = scale * q[d];
          Kr[d] = k[d];
          Yr[d] = v[d] - k[d];
        }
        return;
      }
    }
    copy_in(in.q, b, t, hq, Q, r, scale);
    copy_in(in.k, b, t, hq, K, r, A(1));
    copy_in(in.v, b, t, hv, Y, r, A(1));
    Y.row(r) -= K.row(r);  // target v - k
  }

  /// out(b, t, hv, :) <- row r of O.
  template <class T>
  void store_row(const tensor_view<T, 4>& out, index_t r, index_t b, index_t t, index_t hv) const {
    const index_t D = O.cols(), sd = out.stride(3);
    T* dst = &out(b, t, hv, 0);
    if (sd == 1)
      Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(dst, D) = O.row(r).template cast<T>();
    else
      for (index_t d = 0; d < D; ++d) dst[d * sd] = static_cast<T>(O(r, d));
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
    if (x.stride(3) != 1) return;
    const char* p = reinterpret_cast<const char*>(&x(b, t, h, 0));
    for (index_t o = 0; o < x.extent(3) * index_t(sizeof(x(b, t, h, 0))); o += 64) {
#if defined(__GNUC__) || defined(__clang__)
      if (write) __builtin_prefetch(p + o, 1, 3);
      else __builtin_prefetch(p + o, 0, 3);
#endif
    }
  }

  template <class T>
  static void copy_in(const tensor_view<const T, 4>& x, index_t b, index_t t, index_t head, mat<A>& dst, index_t r,
                      A factor) {
    const index_t D = x.extent(3), sd = x.stride(3);
    const T* src = &x(b, t, head, 0);
    if (sd == 1)
      dst.row(r) = Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(src, D).template cast<A>() * factor;
    else
      for (index_t d = 0; d < D; ++d) dst(r, d) = factor * static_cast<A>(src[d * sd]);
  }
};

}  // namespace linattn::cpu
