// SPDX-License-Identifier: MIT
/// \file
/// Backward pass 1 (delta family only), independent for every chunk and value head: the
/// products of the WY/UT representation that the two state passes apply to every column block
/// of the state, summed in fp32 and written as the workspace's rows (bf16 for bf16 inputs
/// with scalar or no gates: workspace_row_t, workspace_hand_over_t):
///
///   forward:   W = T diag(Gam) K,  U = T V       (U~ = U - W H, the corrected values)   [C, K], [C, V]
///   backward:  Wb = M^T diag(e) K,  dYl = M^T P^T dO  (dY = Wb dH + dYl, dX = diag(beta) dY)
///
/// with M = (I + diag(beta) stril(K K^T ⊙ D))^{-1}, T = M diag(beta) and P = scale Q K^T ⊙ D
/// (causal); and the betas, with which pass 3 takes dX = diag(beta) dY (it hands dY to pass 4,
/// which could not recover it from dX where beta is 0). The diagonal factors and P go
/// into [C, C] left operands (T diag(Gam), (diag(e) M)^T, (P M)^T) rather than into [C, K] and
/// [C, V] copies of the rows, which keeps the block's shared memory small enough for two
/// blocks per multiprocessor.
///
/// Per-key decays (KDA) cannot fold them into [C, C] operands: there the products take the
/// rows K ⊙ Gam and K ⊙ E (key_decays.cuh), W = T (K ⊙ Gam), Wb = M^T (K ⊙ E), with the
/// per-key P and G.
///
/// The products take pass 4's precision (gradient_products: for bf16 inputs register mma.sync
/// products of split bf16 terms, skipping the lo terms of the rows as loaded, which are exact;
/// with scalar gates those rows stay bf16 in shared memory and are read by ldmatrix),
/// so both passes form the scores and the Gram matrix alike.
#pragma once

#include "../../tile/tile_product.cuh"
#include "chunk_factors.cuh"
#include "key_decays.cuh"

namespace linattn::cuda::detail {

/// The rows are fp32 tiles, except for bf16 inputs with scalar or no gates: those keep q, k, v
/// and dO as loaded in bf16 (q not scaled), which hold their values exactly and which the
/// mma.sync products read by ldmatrix with no conversion and no lo terms. That also halves the
/// block's shared memory (three blocks per multiprocessor instead of two). The left factors of
/// the four products (T diag(Gam), T, diag(e) M, P M) are operand tiles (operand_tiles.cuh):
/// with exact rows split into their bf16 terms once as they are formed, rather than by each of
/// the eight units of a product that read them.
template <class T, int K, int V>
struct chunk_wy_storage {
  static constexpr int warps = 8, threads = 32 * warps;
  static constexpr bool exact_rows = std::is_same_v<T, __nv_bfloat16>;
  using row_t = std::conditional_t<exact_rows, T, float>;
  static constexpr int pad = exact_rows ? 8 : 4;  // 16-byte aligned rows: conflict-free ldmatrix, WMMA loads
  static constexpr int C = backward_chunk, ldk = K + pad, ldv = V + pad;
  static constexpr int ldc = chunk_corrections::ld;
  using factor_tile = operand_tile<gradient_products<T>, C, C>;
  row_t keys[C][ldk];      // [C, K]
  row_t queries[C][ldk];   // [C, K]  scale q, or q (exact rows); after the scores diag(e) M (e_m())
  row_t values[C][ldv];    // [C, V]
  row_t dout[C][ldv];      // [C, V]
  float p[C][ldc];         // [C, C]  P
  float g[C][ldc];         // [C, C]  G
  float m[C][ldc];         // [C, C]  M
  factor_tile t_gam, t, pm;  // [C, C]  T diag(Gam), T, P M
  chunk_coefficients cf;
  float stage[stage_warps<gradient_products<T>, warps>][stage_floats];  // WMMA products only
  // [warps][16][ld]  the way out of bf16 results (staged_row_writer): exact rows only
  alignas(16) __nv_bfloat16 out_stage[exact_rows ? staged_row_writer::stage_elements(warps) : 8];

  // diag(e) M in the queries' place where it fits (not with bf16 rows at K = 64)
  static constexpr bool e_m_in_queries = sizeof(queries) >= sizeof(factor_tile);
  alignas(16) std::conditional_t<e_m_in_queries, unsigned char[16], factor_tile> e_m_own;

  __device__ factor_tile& e_m() {
    if constexpr (e_m_in_queries) return *reinterpret_cast<factor_tile*>(&queries[0][0]);
    else return e_m_own;
  }
};

/// Per-key decays (KDA): fp32 rows, and the [C, C] factors as fp32 tiles that the products
/// convert as they read them; the queries' tile holds K ⊙ Gam, then K ⊙ E, after the scores.
template <class T, int K, int V>
struct chunk_wy_per_key_storage {
  static constexpr int warps = 8, threads = 32 * warps;
  static constexpr bool exact_rows = false;
  static constexpr int pad = 4;  // 16-byte aligned rows: conflict-free WMMA loads
  static constexpr int C = backward_chunk, ldk = K + pad, ldv = V + pad;
  static constexpr int ldc = chunk_corrections::ld;
  float keys[C][ldk];      // [C, K]
  float queries[C][ldk];   // [C, K]  scale q; after the scores K ⊙ Gam, then K ⊙ E
  float values[C][ldv];    // [C, V]
  float dout[C][ldv];      // [C, V]
  float p[C][ldc];         // [C, C]  P
  float pt[C][ldc];        // [C, C]  P M
  chunk_corrections cr;    // G, M, T
  chunk_coefficients cf;
  float stage[stage_warps<gradient_products<T>, warps>][stage_floats];  // WMMA products only
  float b[C][ldk];         // [C, K]  the chunk-local cumsum of the log gates
};

/// The epilogue that writes a product's rows r < n to the workspace view `to` at chunk t0:
/// with exact rows (bf16 inputs, scalar or no gates) a warp's unit at a time through the
/// block's out_stage, else as the products give them. Per-key decays keep the pairs: their
/// bf16 W and Wb measured no faster staged (bench/cuda/NOTES.md, session 52), and 6 KiB more
/// would leave their two blocks per multiprocessor 256 bytes to spare.
template <class S, class E>
__device__ auto wy_rows_out(S& s, const tensor_view<E, 4>& to, index_t b, index_t t0, index_t hv, int n) {
  if constexpr (S::exact_rows) return staged_row_writer{to, b, t0, hv, n, s.out_stage};
  else return row_writer(to, b, t0, hv, n);
}

template <class Rule, class T, int K, int V>
__global__ void __launch_bounds__(256) chunk_wy_kernel(backward_args<Rule, T> args) {
  using S = chunk_wy_storage<T, K, V>;
  using P = gradient_products<T>;
  constexpr int C = S::C;
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& s = *reinterpret_cast<S*>(dynamic_smem);
  const auto [b, t0, hv, n] = args.block_chunk();
  float* stage = s.stage[0];

  const auto beta = lane_beta_ahead(args, b, t0, n, hv);  // in flight over the rows' stores and the barrier
  {
    chunk_input_rows<K, V, S::threads, T> rows;
    rows.issue(args, b, t0, n, hv);
    chunk_decays(args, s.cf, b, t0, n, hv);
    if constexpr (S::exact_rows) rows.store_as_loaded(s.queries[0], s.keys[0], S::ldk, s.values[0], s.dout[0], S::ldv);
    else rows.store(s.queries[0], s.keys[0], S::ldk, s.values[0], s.dout[0], S::ldv, args.scale);
  }
  __syncthreads();
  chunk_betas<K>(args, s.cf, s.keys[0], S::ldk, b, t0, n, hv, beta);
  chunk_scores_gram<P, K>(s.queries[0], S::ldk, s.keys[0], S::ldk, s.cf, s.p[0], s.g[0], stage,
                          S::exact_rows ? args.scale : 1.0f);
  chunk_solve_columns(s.cf, s.g[0], [&](int c, const float (&col)[C]) {
#pragma unroll
    for (int r = 0; r < C; ++r) s.m[r][c] = col[r];
  });
  if (int(threadIdx.x) < n) args.betas(b, t0 + threadIdx.x, hv) = s.cf.beta[threadIdx.x];  // for pass 3
  // P M beside the factors of M, each thread a pair of columns of a row at a time
  tile_product<P, row_major, row_major, C, C, C>(s.p[0], S::ldc, s.m[0], S::ldc, stage, operand_epilogue(s.pm));
  auto& e_m = s.e_m();
  for (int x = int(threadIdx.x); x < C * C / 2; x += int(blockDim.x)) {
    const int r = x / (C / 2), c = 2 * (x % (C / 2));
    const float m0 = s.m[r][c], m1 = s.m[r][c + 1];
    const float x0 = m0 * s.cf.beta[c], x1 = m1 * s.cf.beta[c + 1];  // T = M diag(beta)
    s.t.store(r, c, x0, x1);
    s.t_gam.store(r, c, x0 * s.cf.gam[c], x1 * s.cf.gam[c + 1]);
    e_m.store(r, c, m0 * s.cf.e[r], m1 * s.cf.e[r]);
  }
  __syncthreads();
  const auto rows_out = [&](const auto& to) { return wy_rows_out(s, to, b, t0, hv, n); };
  constexpr exact_operands rows = exact_operands::b;  // keys, values and dO as loaded (fp32 tiles)
  constexpr int ldf = S::factor_tile::ld;
  tile_product<P, row_major, row_major, C, K, C, true, rows>(s.t_gam.operand(), ldf, s.keys[0], S::ldk, stage,
                                                             rows_out(args.w_fwd));
  tile_product<P, row_major, row_major, C, V, C, true, rows>(s.t.operand(), ldf, s.values[0], S::ldv, stage,
                                                             rows_out(args.u_rows));
  tile_product<P, col_major, row_major, C, K, C, false, rows>(e_m.operand(), ldf, s.keys[0], S::ldk, stage,
                                                              rows_out(args.w_bwd));
  tile_product<P, col_major, row_major, C, V, C, false, rows>(s.pm.operand(), ldf, s.dout[0], S::ldv, stage,
                                                              rows_out(args.dy_rows));
}

template <class Rule, class T, int K, int V>
__global__ void __launch_bounds__(256) chunk_wy_per_key_kernel(backward_args<Rule, T> args) {
  using S = chunk_wy_per_key_storage<T, K, V>;
  using P = gradient_products<T>;
  constexpr int C = S::C;
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& s = *reinterpret_cast<S*>(dynamic_smem);
  const auto [b, t0, hv, n] = args.block_chunk();
  float* stage = s.stage[0];

  const auto beta = lane_beta_ahead(args, b, t0, n, hv);  // in flight over the rows' stores and the barrier
  {
    chunk_input_rows<K, V, S::threads, T> rows;
    key_gate_rows<K, S::threads> gr;
    rows.issue(args, b, t0, n, hv);
    gr.issue(args, b, t0, n, hv);
    rows.store(s.queries[0], s.keys[0], S::ldk, s.values[0], s.dout[0], S::ldv, args.scale);
    gr.store(s.b[0], S::ldk);
  }
  __syncthreads();
  column_cumsum<K>(s.b[0], S::ldk);
  chunk_betas<K>(args, s.cf, s.keys[0], S::ldk, b, t0, n, hv, beta);
  __syncthreads();
  key_scores<K>(s.queries[0], s.keys[0], s.b[0], S::ldk, s.p[0], s.cr.g[0], true);
  // The queries are read only by the scores: their tile then holds the decayed keys, which keeps
  // the block's shared memory small enough for two blocks per multiprocessor.
  float* const decayed = s.queries[0];
  __syncthreads();
  key_decayed<K>(decayed, s.keys[0], S::ldk, s.b[0], false);  // K ⊙ Gam
  __syncthreads();
  chunk_solve(s.cf, s.cr);
  if (int(threadIdx.x) < n) args.betas(b, t0 + threadIdx.x, hv) = s.cf.beta[threadIdx.x];  // for pass 3
  tile_product<P, row_major, row_major, C, C, C>(s.p[0], S::ldc, s.cr.m[0], S::ldc, stage, tile_epilogue(s.pt));  // P M
  const auto rows_out = [&](const auto& to) { return wy_rows_out(s, to, b, t0, hv, n); };
  constexpr exact_operands rows = exact_operands::b;  // values and dO as loaded
  tile_product<P, row_major, row_major, C, K, C, true>(s.cr.t[0], S::ldc, decayed, S::ldk, stage, rows_out(args.w_fwd));
  tile_product<P, row_major, row_major, C, V, C, true, rows>(s.cr.t[0], S::ldc, s.values[0], S::ldv, stage,
                                                             rows_out(args.u_rows));
  __syncthreads();  // P M complete; K ⊙ Gam read
  key_decayed<K>(decayed, s.keys[0], S::ldk, s.b[0], true);  // K ⊙ E
  __syncthreads();
  tile_product<P, col_major, row_major, C, K, C>(s.cr.m[0], S::ldc, decayed, S::ldk, stage, rows_out(args.w_bwd));
  tile_product<P, col_major, row_major, C, V, C, false, rows>(s.pt[0], S::ldc, s.dout[0], S::ldv, stage,
                                                              rows_out(args.dy_rows));
}

}  // namespace linattn::cuda::detail
