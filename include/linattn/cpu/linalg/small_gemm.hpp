// SPDX-License-Identifier: MIT
/// \file
/// Register-blocked products of small row-major blocks whose sizes are known at compile time
/// (the TTT dual form's per-mini-batch products: 16 x 64 x 64 and smaller, all in L1):
///
///   C = alpha A B        or, with Accumulate,   C = C + alpha A B
///   A: [M, K] read element-wise at a[i * a_row + k * a_col] (any strides: A may be a
///      transposed view), B: [K, N] rows b + k * ldb, C: [M, N] rows c + i * ldc
///
/// No packing: each output tile of R rows x NC packets stays in registers for the whole K
/// loop, one row of B is loaded per k and A's elements are broadcast. Eigen's packet
/// functions keep it portable (AVX-512, AVX2, SSE, NEON, or scalars without vectorisation);
/// the tile shape follows the target's register count. With Lower, row i only sums k <= i
/// of its row tile's last row (for an A that is zero above its diagonal).
#pragma once

#include <algorithm>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "../../core/config.hpp"

namespace linattn::cpu {

/// Inlines every call in the function's body (the unroll() lambdas below): a register tile
/// whose accumulators spill because one lambda was left out of line runs ~3x slower.
#if defined(__GNUC__) || defined(__clang__)
#define LINATTN_FLATTEN __attribute__((flatten))
#else
#define LINATTN_FLATTEN
#endif

/// Calls f(std::integral_constant<int, 0>) ... f(std::integral_constant<int, N - 1>) in
/// order: loops over register tiles unrolled at compile time.
template <int N, class F>
EIGEN_ALWAYS_INLINE void unroll(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    (f(std::integral_constant<int, I>{}), ...);
  }(std::make_integer_sequence<int, N>{});
}

/// The packet type of scalar S and its width.
template <class S>
struct packet_of {
  using type = typename Eigen::internal::packet_traits<S>::type;
  static constexpr int size = Eigen::internal::unpacket_traits<type>::size;
};

template <class S, int M, int N, int K, bool Lower = false>
struct small_gemm {
  using P = typename packet_of<S>::type;
  static constexpr int W = packet_of<S>::size;
  static_assert(N % W == 0, "small_gemm: the row length N must be a multiple of the packet width");
  static constexpr int NP = N / W;  // packets per row of B and C
  // Register tile: up to 24 accumulators with 32 vector registers (AVX-512: B's packets and
  // A's broadcasts fold into the FMAs), 8 with 16 (AVX2, SSE, NEON: broadcasts need a register).
  static constexpr bool many_regs = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS >= 32;
  static constexpr int NC = std::min(NP, many_regs ? 4 : 2);
  static constexpr int R = std::min(M, std::min(8, (many_regs ? 24 : 8) / NC));
  static_assert(NP % NC == 0, "small_gemm: the row length must be whole register tiles");

  /// rows_done(i0, n) runs as soon as rows [i0, i0 + n) of C are final (an epilogue that
  /// finds them in L1 and overlaps the next register tiles' arithmetic).
  template <bool Accumulate, class RowsDone>
  static void run(S alpha, const S* a, index_t a_row, index_t a_col, const S* b, index_t ldb, S* c, index_t ldc,
                  RowsDone&& rows_done) {
    int i = 0;
    for (; i + R <= M; i += R) {
      for (int j = 0; j < NP; j += NC) tile<R, Accumulate>(alpha, a, a_row, a_col, b, ldb, c, ldc, i, j * W);
      rows_done(i, R);
    }
    if constexpr (M % R != 0) {
      for (int j = 0; j < NP; j += NC) tile<M % R, Accumulate>(alpha, a, a_row, a_col, b, ldb, c, ldc, i, j * W);
      rows_done(i, M % R);
    }
  }
  template <bool Accumulate>
  static void run(S alpha, const S* a, index_t a_row, index_t a_col, const S* b, index_t ldb, S* c, index_t ldc) {
    run<Accumulate>(alpha, a, a_row, a_col, b, ldb, c, ldc, [](int, int) {});
  }

 private:
  /// Rows [i0, i0 + RT) and columns [j0, j0 + NC W) of C.
  template <int RT, bool Accumulate>
  LINATTN_FLATTEN static void tile(S alpha, const S* a, index_t a_row, index_t a_col, const S* b, index_t ldb,
                   S* c, index_t ldc, int i0, int j0) {
    using namespace Eigen::internal;
    P acc[RT][NC];
    unroll<RT>([&](auto r) { unroll<NC>([&](auto q) { acc[r][q] = pset1<P>(S(0)); }); });
    const int kend = Lower ? std::min(K, i0 + RT) : K;
    const S* ai = a + i0 * a_row;
    for (int k = 0; k < kend; ++k) {
      const S* bk = b + k * ldb + j0;
      P bp[NC];
      unroll<NC>([&](auto q) { bp[q] = ploadu<P>(bk + q * W); });
      unroll<RT>([&](auto r) {
        const P av = pset1<P>(ai[r * a_row + k * a_col]);
        unroll<NC>([&](auto q) { acc[r][q] = pmadd(av, bp[q], acc[r][q]); });
      });
    }
    const P al = pset1<P>(alpha);
    unroll<RT>([&](auto r) {
      S* cr = c + (i0 + r) * ldc + j0;
      unroll<NC>([&](auto q) {
        if constexpr (Accumulate) pstoreu(cr + q * W, pmadd(al, acc[r][q], ploadu<P>(cr + q * W)));
        else pstoreu(cr + q * W, pmul(al, acc[r][q]));
      });
    });
  }
};

}  // namespace linattn::cpu
