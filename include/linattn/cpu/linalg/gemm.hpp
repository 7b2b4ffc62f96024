// SPDX-License-Identifier: MIT
/// \file
/// The CPU kernels' one product routine for small row-major matrices, without packing:
///
///   C[i, :] = alpha alpha_i (A B)[i, :] + beta beta_i C[i, :]   A: [m, k] any strides, B: [k, n]
///                                                             and C: [m, n] rows contiguous
///
/// for the chunk products (runtime sizes up to 256 x 256 x 128) and the TTT mini-batch
/// products (16 x 64 x 64 and smaller: sizes given as fix<N> specialise the same code).
/// Optional triangles (the chunk's products are causal), diagonal offset d:
///   - `lower_a`: A(i, p) = 0 for p > i + d, so row i stops at p = i + d (rounded up to its
///     row tile);
///   - `lower_c`: only C(i, j) for j <= i + d is wanted; the rest of each row tile's columns
///     are not computed and hold garbage or old values.
///
/// Packing the operands (Eigen's GEMM) costs more than it saves at these sizes. Instead B's
/// rows are read in place in strips of 4 packets (128 x 64 floats: 32 KiB, L1-resident while
/// every row tile of A passes), A's entries are broadcast from wherever they are (Aᵀ of a
/// row-major matrix costs nothing), and a tile of C (up to 6 rows x 4 packets) stays in
/// registers for the whole sum. Eigen's packets keep it portable (AVX-512 with masked last
/// packets; AVX2, SSE, NEON or scalars with scalar last columns).
#pragma once

#include <algorithm>
#include <type_traits>
#include <utility>

#include "../../core/config.hpp"
#include "eigen_types.hpp"  // Eigen and <immintrin.h>
#include "packet_warnings.hpp"

LINATTN_PACKET_WARNINGS_OFF

namespace linattn::cpu {

/// Inlines every call in the function's body (the unroll() lambdas): a register tile whose
/// accumulators spill because one lambda was left out of line runs several times slower.
#if defined(__GNUC__) || defined(__clang__)
#define LINATTN_FLATTEN __attribute__((flatten))
#else
#define LINATTN_FLATTEN
#endif

/// Calls f(std::integral_constant<int, 0>) ... f(std::integral_constant<int, N - 1>) in
/// order: loops over registers unrolled at compile time.
template <int N, class F>
EIGEN_ALWAYS_INLINE void unroll(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }(
      std::make_integer_sequence<int, N>{});
}

/// The packet type of scalar S and its width.
template <class S>
struct packet_of {
  using type = typename Eigen::internal::packet_traits<S>::type;
  static constexpr int size = Eigen::internal::unpacket_traits<type>::size;
};

/// Which entries of a product are needed (see the file comment).
enum class triangle { none, lower_a, lower_c };

/// An extent known at compile time (a plain index_t is a runtime one).
template <index_t N>
inline constexpr std::integral_constant<index_t, N> fix{};

/// Strided read-only view of a matrix: element (i, p) at data[i * rs + p * cs].
template <class S>
struct strided {
  const S* data;
  index_t rs, cs;
};

/// A row-major Eigen block as a strided view (cols_of: transposed).
template <class X>
auto rows_of(const X& x) {
  return strided<typename X::Scalar>{x.data(), x.outerStride(), 1};
}
template <class X>
auto cols_of(const X& x) {
  return strided<typename X::Scalar>{x.data(), 1, x.outerStride()};
}

/// The scalars of a product: `row_alpha` and `row_beta` m row factors or nullptr (all 1);
/// beta = 0 does not read C; `diag` the triangle's diagonal offset d. A row factor of C (a
/// per-row decay of a state, say) is one fused multiply-add in the product's store instead of a
/// pass over C of its own.
template <class S>
struct gemm_params {
  S alpha = S(1);
  const S* row_alpha = nullptr;
  S beta = S(0);
  const S* row_beta = nullptr;
  index_t diag = 0;
};

namespace gemm_impl {

/// N for fix<N>, -1 for a runtime extent.
template <class E>
inline constexpr index_t extent_v = -1;
template <index_t N>
inline constexpr index_t extent_v<std::integral_constant<index_t, N>> = N;

/// Partial packets: AVX-512 loads and stores the first lanes of a packet under a mask.
#if defined(EIGEN_VECTORIZE_AVX512)
template <class P>
inline constexpr bool masked = std::is_same_v<P, __m512> || std::is_same_v<P, __m512d>;
inline __m512 load_lanes(const float* p, unsigned m) { return _mm512_maskz_loadu_ps(__mmask16(m), p); }
inline __m512d load_lanes(const double* p, unsigned m) { return _mm512_maskz_loadu_pd(__mmask8(m), p); }
inline void store_lanes(float* p, __m512 v, unsigned m) { _mm512_mask_storeu_ps(p, __mmask16(m), v); }
inline void store_lanes(double* p, __m512d v, unsigned m) { _mm512_mask_storeu_pd(p, __mmask8(m), v); }
#else
template <class P>
inline constexpr bool masked = false;
#endif

/// Register tile of NC packets x R rows for n (N) columns and m (M) rows: up to 24
/// accumulators with 32 vector registers (AVX-512: B's packets and A's broadcasts fold into
/// the FMAs), 8 with 16 (AVX2, SSE, NEON: a broadcast needs a register).
template <class S, class M, class N>
struct tile_shape {
  static constexpr bool many_regs = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS >= 32;
  static constexpr index_t W = packet_of<S>::size, NP = extent_v<N> > 0 ? (extent_v<N> + W - 1) / W : 4;
  static constexpr int NC = int(std::min<index_t>(NP, many_regs ? 4 : 2));
  static constexpr int R = std::min(extent_v<M> > 0 ? int(std::min<index_t>(extent_v<M>, 8)) : 8,
                                    (many_regs ? 24 : 8) / NC);
  static constexpr index_t strip = NC * W;  // columns per strip of B
};

/// Calls f(std::integral_constant<int, v>) for a runtime v in [Lo, Hi].
template <int Lo, int Hi, class F>
EIGEN_ALWAYS_INLINE void with_constant(int v, F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    (void)((v == Lo + I ? (f(std::integral_constant<int, Lo + I>{}), true) : false) || ...);
  }(std::make_integer_sequence<int, Hi - Lo + 1>{});
}

/// One product's operands, passed to its tiles by reference (no struct copies per tile).
template <class S>
struct operands {
  strided<S> a;
  const S* b;
  index_t ldb;
  S* c;
  index_t ldc;
  gemm_params<S> x;
};

/// C[i0 : i0 + RT, j0 : j0 + NZ packets] over p in [0, k); with Masked, only the lanes
/// `last` of the last packet.
template <class P, int RT, int NZ, bool Masked, class S, class KT>
LINATTN_FLATTEN void tile(const operands<S>& o, index_t i0, index_t j0, KT k, unsigned last) {
  using namespace Eigen::internal;
  constexpr int W = unpacket_traits<P>::size;
  // Everything in locals before the first store to C (which could alias o).
  const S* const a = o.a.data + i0 * o.a.rs;
  const index_t ars = o.a.rs, acs = o.a.cs, ldb = o.ldb, ldc = o.ldc;
  const S* const b = o.b + j0;
  S* const c = o.c + i0 * ldc + j0;
  const S alpha = o.x.alpha, beta = o.x.beta;
  const S* const row_alpha = o.x.row_alpha ? o.x.row_alpha + i0 : nullptr;
  const S* const row_beta = o.x.row_beta ? o.x.row_beta + i0 : nullptr;
  auto load = [&](auto z, const S* p) {
    if constexpr (Masked && z == NZ - 1) return load_lanes(p, last);
    else return ploadu<P>(p);
  };
  auto store = [&](auto z, S* p, const P& v) {
    if constexpr (Masked && z == NZ - 1) store_lanes(p, v, last);
    else pstoreu(p, v);
  };
  P acc[RT][NZ];
  unroll<RT>([&](auto r) { unroll<NZ>([&](auto z) { acc[r][z] = pset1<P>(S(0)); }); });
  for (index_t p = 0; p < k; ++p) {
    P bv[NZ];
    unroll<NZ>([&](auto z) { bv[z] = load(z, b + p * ldb + z * W); });
    unroll<RT>([&](auto r) {
      const P av = pset1<P>(a[r * ars + p * acs]);
      unroll<NZ>([&](auto z) { acc[r][z] = pmadd(av, bv[z], acc[r][z]); });
    });
  }
  auto epilogue = [&](auto beta_kind) {  // 0: beta = 0, 1: beta = 1, 2: other (one branch per tile)
    unroll<RT>([&](auto r) {
      const P al = pset1<P>(row_alpha ? alpha * row_alpha[r] : alpha);
      const P bt = pset1<P>(row_beta ? beta * row_beta[r] : beta);  // read by beta_kind 2 only
      S* cr = c + r * ldc;
      unroll<NZ>([&](auto z) {
        if constexpr (beta_kind == 0) store(z, cr + z * W, pmul(al, acc[r][z]));
        else if constexpr (beta_kind == 1) store(z, cr + z * W, pmadd(al, acc[r][z], load(z, cr + z * W)));
        else store(z, cr + z * W, pmadd(bt, load(z, cr + z * W), pmul(al, acc[r][z])));
      });
    });
  };
  if (beta == S(0)) epilogue(std::integral_constant<int, 0>{});
  else if (beta == S(1) && !row_beta) epilogue(std::integral_constant<int, 1>{});
  else epilogue(std::integral_constant<int, 2>{});
}

/// Columns [j0, j0 + cols) of rows [i0, i0 + RT), cols <= one strip: whole packets, the rest
/// masked (AVX-512) or one scalar column at a time.
template <class S, int RT, int NC, class KT>
void strip_rows(const operands<S>& o, index_t i0, index_t j0, KT k, index_t cols) {
  using P = typename packet_of<S>::type;
  constexpr index_t W = packet_of<S>::size;
  if constexpr (masked<P>) {
    const int nz = int((cols + W - 1) / W);
    const auto last = unsigned((1ull << (cols - W * (nz - 1))) - 1u);
    with_constant<1, NC>(nz, [&](auto NZ) { tile<P, RT, NZ, true>(o, i0, j0, k, last); });
  } else {
    const int full = int(cols / W);
    if (full > 0) with_constant<1, NC>(full, [&](auto NZ) { tile<P, RT, NZ, false>(o, i0, j0, k, 0); });
    for (index_t j = full * W; j < cols; ++j) tile<S, RT, 1, false>(o, i0, j0 + j, k, 0);
  }
}

/// The product over one block of k (all of it for fixed and short sums): strips of B
/// outside, row tiles inside; rows_done once a row tile's last strip is stored.
template <triangle Tri, class S, class M, class N, class K, class RowsDone>
void panel(M m, N n, K k, const operands<S>& o, RowsDone&& rows_done) {
  using shape = tile_shape<S, M, N>;
  constexpr int R = shape::R, NC = shape::NC;
  constexpr index_t strip = shape::strip;
  constexpr int tail = extent_v<M> > 0 ? int(extent_v<M> % R) : 0;  // rows of a fixed m's last tile
  // Fixed sizes of whole strips take full tiles, no masks, no runtime dispatch.
  constexpr bool whole_strips = extent_v<N> > 0 && extent_v<N> % strip == 0 && Tri != triangle::lower_c;
  const index_t d = o.x.diag;
  for (index_t j0 = 0; j0 < n; j0 += strip) {
    for (index_t i0 = 0; i0 < m; i0 += R) {
      const index_t rows = std::min<index_t>(R, m - i0);
      index_t cols = std::min<index_t>(strip, n - j0);
      if constexpr (Tri == triangle::lower_c) cols = std::min(cols, i0 + rows + d - j0);  // up to column i + d
      const auto kk = [&] {
        if constexpr (Tri == triangle::lower_a) return std::clamp<index_t>(i0 + rows + d, 0, k);
        else return k;
      }();
      if (cols > 0 && kk == 0) {  // empty sum: C = beta C
        for (index_t r = i0; r < i0 + rows; ++r)
          for (S* cr = o.c + r * o.ldc + j0; cr < o.c + r * o.ldc + j0 + cols; ++cr)
            *cr = o.x.beta != S(0) ? (o.x.row_beta ? o.x.beta * o.x.row_beta[r] : o.x.beta) * *cr : S(0);
      } else if (cols > 0) {
        auto run_rows = [&](auto RT) {
          if constexpr (whole_strips) tile<typename packet_of<S>::type, RT, NC, false>(o, i0, j0, kk, 0);
          else strip_rows<S, RT, NC>(o, i0, j0, kk, cols);
        };
        if (rows == R) run_rows(std::integral_constant<int, R>{});
        else if constexpr (tail > 0) run_rows(std::integral_constant<int, tail>{});
        else if constexpr (extent_v<M> < 0 && R > 1) with_constant<1, R - 1>(int(rows), run_rows);
      }
      if (j0 + strip >= n) rows_done(i0, rows);
    }
  }
}

struct ignore_rows {
  void operator()(index_t, index_t) const {}
};

}  // namespace gemm_impl

/// C = alpha diag(row_alpha) A B + beta diag(row_beta) C (see the file comment) for C: [m, n] with rows at
/// c + i ldc, A: [m, k] viewed by `a`, B: [k, n] with rows at b + p ldb; m, n, k are index_t
/// or fix<N>. rows_done(i0, r) runs as soon as rows [i0, i0 + r) of C are final (an epilogue
/// that finds them in L1). C must not overlap A or B.
template <triangle Tri = triangle::none, class S, class M, class N, class K, class RowsDone = gemm_impl::ignore_rows>
void gemm(M m, N n, K k, strided<S> a, const S* b, index_t ldb, S* c, index_t ldc, const gemm_params<S>& x = {},
          RowsDone&& rows_done = {}) {
  if (m == 0 || n == 0) return;
  if constexpr (gemm_impl::extent_v<K> < 0) {
    // Long sums (a whole sequence in the parallel form) in blocks of kc, so that a strip of
    // B stays in cache: C = alpha A_1 B_1 + beta C, then C += alpha A_j B_j.
    constexpr index_t kc = 256, R = gemm_impl::tile_shape<S, M, N>::R;
    if (k > kc) {
      for (index_t p0 = 0; p0 < k; p0 += kc) {
        gemm_impl::operands<S> o{{a.data + p0 * a.cs, a.rs, a.cs}, b + p0 * ldb, ldb, c, ldc, x};
        index_t first = 0;  // lower_a: rows whose causal range ends before p0 take nothing here
        if (p0 > 0) o.x.beta = S(1), o.x.row_beta = nullptr;
        if (Tri == triangle::lower_a && p0 > 0) first = std::clamp<index_t>((p0 - x.diag) / R * R, 0, m);
        o.a.data += first * a.rs;
        o.c += first * ldc;
        o.x.row_alpha = x.row_alpha ? x.row_alpha + first : nullptr;
        o.x.diag += Tri == triangle::lower_a ? first - p0 : 0;
        if (first < m) gemm_impl::panel<Tri>(m - first, n, std::min(kc, k - p0), o, gemm_impl::ignore_rows{});
      }
      rows_done(index_t(0), index_t(m));
      return;
    }
  }
  gemm_impl::panel<Tri>(m, n, k, gemm_impl::operands<S>{a, b, ldb, c, ldc, x}, rows_done);
}

/// The same for Eigen row-major blocks: C [m, n], B [k, n].
template <triangle Tri = triangle::none, class CBlock, class S, class BBlock>
void gemm(CBlock&& C, strided<S> a, const BBlock& B, const gemm_params<S>& x = {}) {
  gemm<Tri>(index_t(C.rows()), index_t(C.cols()), index_t(B.rows()), a, B.data(), B.outerStride(), C.data(),
            C.outerStride(), x);
}

}  // namespace linattn::cpu

LINATTN_PACKET_WARNINGS_ON
