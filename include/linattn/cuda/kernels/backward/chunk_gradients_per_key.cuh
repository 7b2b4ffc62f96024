// SPDX-License-Identifier: MIT
/// \file
/// Backward pass 4 for per-key decays (VectorDecay, KDA; docs/backward.md#cuda-per-key),
/// independent for every chunk and value head. With b [C, K] the chunk's log-gate cumsum,
/// Gam = exp(b), E = exp(b_{n-1} - b), D_rcd = exp(b_rd - b_cd), H0 the chunk's start state
/// (pass 2) and dH the gradient of its end state (pass 3):
///
///   U = T X, dY = M^T dU as the state passes wrote them (delta family; else U = V and
///   dU = (K ⊙ E) dH + P^T dO = dV),  dP = dO U^T (causal)
///   dX = dV = diag(beta) dY,  dA = -stril(dY U^T),  dG = diag(beta) dA,  W = dY H0^T  (delta)
///   dbeta_r = dY_r . V_r - Σ_d (K ⊙ Gam)_rd W_rd + Σ_c dA_rc G_rc        (= dY_r . X_r + ...)
///   dQ_rd  = Gam_rd (dO H0^T)_rd + Σ_{c<=r} dP_rc k_cd D_rcd                    (k_r, q_r: D_rrd = 1)
///   dK+_rd = -beta_r Gam_rd W_rd + Σ_{c<r} dG_rc k_cd D_rcd             (k_r carries exp(+b_r))
///   dK-_cd = E_cd (U dH^T)_cd + Σ_{r>=c} dP_rc q_rd D_rcd + Σ_{r>c} dG_rc k_rd D_rcd   (exp(-b_c))
///   dg_td  = Σ_{r>=t} [q_rd dQ'_rd + k_rd (dK+_rd - dK-'_rd)] + Gam_{n-1,d} <dH_d, H0_d> + Σ_{c<t} k_cd E_cd (U dH^T)_cd
///
/// where dQ' and dK-' leave out P's diagonal (dP_rr k_rd and dP_rr q_rd: no gate in it) and
/// dK-' the state write, whose factor E_c = exp(b_{n-1} - b_c) depends on the gates after c
/// only (the prefix sum). Written so, every term of dg carries its own decay: under strong gates
/// dg is tiny and computed to its own precision, not as the difference of O(1) terms.
///
/// The products with H0 or dH (dO H0^T, U dH^T, and W for the delta family, (K ⊙ E) dH for the
/// additive one) are WMMA products read from the workspace; the small ones (dO U^T, dY U^T;
/// additive: P^T dO) take pass 4's precision (gradient_products: for bf16 inputs register
/// mma.sync of split bf16 terms, one fewer where dO or the additive rules' V, exact as loaded,
/// is an operand).
///
/// The intra-chunk sums take their exponentials element by element (every exponent <= 0). dq
/// and dk of each value head go to the workspace in fp32 (dq_parts, dk_parts); group_sum_kernel
/// then adds the value heads of a q/k head in a fixed order, so the result is the same on
/// every run.
#pragma once

#include "../../tile/block_gemm.cuh"
#include "../../tile/load_store.cuh"
#include "../../tile/tile_product.cuh"
#include "chunk_factors.cuh"
#include "key_decays.cuh"

namespace linattn::cuda::detail {

template <int K, int V, bool Delta>
struct chunk_gradients_per_key_storage {
  static constexpr int warps = 16, threads = 32 * warps;
  static constexpr int C = backward_chunk, CD = Delta ? C : 1, CA = Delta ? 1 : C, ldk = K + 4, ldv = V + 4;
  static constexpr int ldc = chunk_corrections::ld;
  float stage[warps][stage_floats];  // first: every tile below starts 32-byte aligned
  float q[C][ldk];      // [C, K]  scale q
  float k[C][ldk];      // [C, K]
  float b[C][ldk];      // [C, K]  log-gate cumsum
  float dq[C][ldk];     // [C, K]  dQ (of the scaled q)
  float dkp[C][ldk];    // [C, K]  -Gam ⊙ W, then dK+ (delta family)
  float dkm[C][ldk];    // [C, K]  K ⊙ E (additive), then E ⊙ (U dH^T), then dK-
  float x[C][ldv];      // [C, V]  V
  float dout[C][ldv];   // [C, V]  dO
  float du[CA][ldv];    // [C, V]  dU (additive family)
  float p[C][ldc];      // [C, C]  P
  float dp[C][ldc];     // [C, C]  dP, causal
  float u[CD][ldv];     // [C, V]  U (delta family, from pass 2)
  float dy[CD][ldv];    // [C, V]  dY (delta family, from pass 3)
  float g[CD][ldc];     // [C, C]  G
  float t[CD][ldc];     // [C, C]  dA, then dG
  chunk_coefficients cf;  // beta, ||k||^2
  float dbeta[C];
  float dk_beta[C];     // [C]  2 dbeta_r d(beta_r)/d||k_r||^2: beta's term of dK, per row (delta family)
  float end_dot[K];     // [K]  <dH_d, H0_d>
};

template <class Rule, class T, int K, int V>
__global__ void __launch_bounds__(chunk_gradients_per_key_storage<K, V, corrects<Rule>>::threads)
    chunk_gradients_per_key_kernel(backward_args<Rule, T> args) {
  constexpr bool delta = corrects<Rule>;
  using S = chunk_gradients_per_key_storage<K, V, delta>;
  using P = backward_products<T>;   // the products with a state
  using Q = gradient_products<T>;   // the products with a [C, C] operand or result
  constexpr int C = S::C, ldk = S::ldk, ldv = S::ldv, ldc = S::ldc;
  static_assert(K <= S::threads, "one thread per key dimension in the gate-gradient phase");
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& s = *reinterpret_cast<S*>(dynamic_smem);
  const int ci = int(blockIdx.x), tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const auto [b, t0, hv, n] = args.block_chunk();
  float* stage = s.stage[0];
  const float* H0 = args.state_at(args.states, ci, hv, K, V);
  const float* dH = args.state_at(args.state_grads, ci, hv, K, V);
  const float* bt = s.b[0];

  [[maybe_unused]] const auto beta = lane_beta_ahead(args, b, t0, n, hv);  // in flight over the rows' stores
  {
    chunk_input_rows<K, V, S::threads, T> rows;
    key_gate_rows<K, S::threads> gr;
    rows.issue(args, b, t0, n, hv);
    gr.issue(args, b, t0, n, hv);
    // U and dY: read first by dP = dO U^T, so their copies stay in flight over the scores
    if constexpr (delta) issue_hand_over<C, V, S::threads>(s.u[0], s.dy[0], ldv, args, b, t0, n, hv);
    rows.store(s.q[0], s.k[0], ldk, s.x[0], s.dout[0], ldv, args.scale);
    gr.store(s.b[0], ldk);
  }
  __syncthreads();
  column_cumsum<K>(s.b[0], ldk);
  if constexpr (delta) chunk_betas<K>(args, s.cf, s.k[0], ldk, b, t0, n, hv, beta);
  // <dH_d, H0_d> per key row, one warp per row (a fixed order of sums)
  for (int d = warp; d < K; d += S::warps) {
    float acc = 0.0f;
    for (int j = lane; j < V; j += 32) acc += dH[d * V + j] * H0[d * V + j];
    acc = warp_sum(acc);
    if (lane == 0) s.end_dot[d] = acc;
  }
  __syncthreads();
  key_scores<K>(s.q[0], s.k[0], bt, ldk, s.p[0], delta ? s.g[0] : nullptr, delta);
  if constexpr (!delta) key_decayed<K>(s.dkm[0], s.k[0], ldk, bt, true);  // K ⊙ E
  if constexpr (delta) wait_copies<0>();  // U and dY are in after the barrier
  __syncthreads();
  const float(*u)[ldv] = delta ? s.u : s.x;
  if constexpr (!delta) {  // dU = (K ⊙ E) dH + P^T dO
    block_gemm<P, row_major, row_major, C, V, K>(s.dkm[0], ldk, dH, V, stage, tile_epilogue(s.du));
    __syncthreads();
    tile_product<Q, col_major, row_major, C, V, C, false, exact_operands::b>(s.p[0], ldc, s.dout[0], ldv, stage,
                                                                            tile_epilogue<tile_update::add>(s.du));
  }
  // dP = dO U^T, causal
  tile_product_split_k<Q, row_major, col_major, C, C, V, dout_u_exact<delta>>(s.dout[0], ldv, u[0], ldv, stage,
                                                                              [&]<int W>(int r, int j, const float (&x)[W]) {
#pragma unroll
    for (int e = 0; e < W; ++e) s.dp[r][j + e] = j + e <= r ? x[e] : 0.0f;
  });
  __syncthreads();
  if constexpr (delta) {
    tile_product_split_k<Q, row_major, col_major, C, C, V>(s.dy[0], ldv, s.u[0], ldv, stage,
        tile_epilogue<tile_update::negated_strictly_lower>(s.t));  // dA = -stril(dY U^T)
    __syncthreads();
    // dbeta_r = dY_r . V_r + Σ_c dA_rc G_rc (the W term after its product);  dA becomes dG = diag(beta) dA
    for (int r = warp; r < C; r += S::warps) {
      float acc = 0.0f;
      for (int i = lane; i < V; i += 32) acc += s.dy[r][i] * s.x[r][i];
      acc += s.t[r][lane] * s.g[r][lane];
      s.t[r][lane] *= s.cf.beta[r];
      acc = warp_sum(acc);
      if (lane == 0) s.dbeta[r] = acc;
    }
  }
  // dv (dX = diag(beta) dY, or dU), then the state terms of dQ, dK- and dK+
  for (int e = tid; e < C * V; e += S::threads) {
    const int r = e / V, j = e % V;
    if (r >= n) continue;
    if constexpr (delta) args.grads.dv(b, t0 + r, hv, j) = from_float<T>(s.cf.beta[r] * s.dy[r][j]);
    else args.grads.dv(b, t0 + r, hv, j) = from_float<T>(s.du[r][j]);
  }
  block_gemm<P, row_major, col_major, C, K, V>(s.dout[0], ldv, H0, V, stage, [&](int r, int j, const float (&x)[8]) {
#pragma unroll
    for (int e = 0; e < 8; ++e) s.dq[r][j + e] = __expf(bt[r * ldk + j + e]) * x[e];
  });
  block_gemm<P, row_major, col_major, C, K, V>(u[0], ldv, dH, V, stage, [&](int r, int j, const float (&x)[8]) {
#pragma unroll
    for (int e = 0; e < 8; ++e) s.dkm[r][j + e] = __expf(bt[(C - 1) * ldk + j + e] - bt[r * ldk + j + e]) * x[e];
  });
  if constexpr (delta) {
    block_gemm<P, row_major, col_major, C, K, V>(s.dy[0], ldv, H0, V, stage, [&](int r, int j, const float (&x)[8]) {
#pragma unroll
      for (int e = 0; e < 8; ++e) s.dkp[r][j + e] = -__expf(bt[r * ldk + j + e]) * x[e];  // -Gam ⊙ W
    });
  }
  __syncthreads();
  // thread d keeps its column of the state write's term E ⊙ (U dH^T) (dK- takes the intra sums)
  const int d = tid;
  float state_write[C];
#pragma unroll
  for (int r = 0; r < C; ++r) state_write[r] = d < K ? s.dkm[r][d] : 0.0f;
  if constexpr (delta)  // dbeta_r += <k_r, -Gam_r ⊙ W_r>;  dK+ = -beta_r Gam_r ⊙ W_r
    for (int r = warp; r < C; r += S::warps) {
      const float br = s.cf.beta[r];
      float acc = 0.0f;
      for (int i = lane; i < K; i += 32) {
        const float y = s.dkp[r][i];
        acc += s.k[r][i] * y;
        s.dkp[r][i] = br * y;
      }
      acc = warp_sum(acc);
      if (lane == 0) s.dbeta[r] += acc;
    }
  __syncthreads();
  // the intra-chunk sums off P's diagonal: item (side, r, d); side 0 is row r (dQ', dK+), side 1
  // column r (dK-', which replaces the state write's term)
  for (int e = tid; e < 2 * C * K; e += S::threads) {
    const int side = e / (C * K), r = (e / K) % C, dd = e % K;
    const float br = bt[r * ldk + dd];
    if (side == 0) {
      float aq = 0.0f, ak = 0.0f;
      for (int i = 0; i < r; ++i) {
        const float kd = s.k[i][dd] * __expf(br - bt[i * ldk + dd]);
        aq += s.dp[r][i] * kd;
        if constexpr (delta) ak += s.t[r][i] * kd;  // dG is strictly lower
      }
      s.dq[r][dd] += aq;
      if constexpr (delta) s.dkp[r][dd] += ak;
    } else {
      float a = 0.0f;
      for (int i = r + 1; i < C; ++i) {
        float w = s.dp[i][r] * s.q[i][dd];
        if constexpr (delta) w += s.t[i][r] * s.k[i][dd];
        a += w * __expf(bt[i * ldk + dd] - br);
      }
      s.dkm[r][dd] = a;
    }
  }
  if constexpr (delta)
    for (int r = tid; r < C; r += S::threads)
      s.dk_beta[r] = r < n ? 2.0f * s.dbeta[r] *
                                 Rule::beta_derivatives(args.in, b, t0 + r, hv, s.cf.sq[r]).d_key_sqnorm
                           : 0.0f;
  __syncthreads();
  // dg (prefix sums of the state write's terms, suffix sums of the others, the end's term), and dq, dk of
  // this value head (with P's diagonal and the state write) to the workspace; dq_parts and dk_parts
  // by pointers stepped along the rows
  if (d < K) {
    float* const dq_row = &args.dq_parts(b, t0, hv, d);
    float* const dk_row = &args.dk_parts(b, t0, hv, d);
    const index_t dq_step = args.dq_parts.stride(1), dk_step = args.dk_parts.stride(1);
    float before[C];
    float prefix = 0.0f;
#pragma unroll
    for (int r = 0; r < C; ++r) before[r] = prefix, prefix += s.k[r][d] * state_write[r];
    float suffix = __expf(bt[(C - 1) * ldk + d]) * s.end_dot[d];
#pragma unroll
    for (int r = C - 1; r >= 0; --r) {
      const float qr = s.q[r][d], kr = s.k[r][d];
      float db = qr * s.dq[r][d] - kr * s.dkm[r][d];
      if constexpr (delta) db += kr * s.dkp[r][d];
      suffix += db;
      if (r < n) {
        store_value(args.grads.dg, suffix + before[r], b, t0 + r, hv, d);
        float dk = state_write[r] + s.dkm[r][d] + s.dp[r][r] * qr;
        if constexpr (delta) dk += s.dkp[r][d] + s.dk_beta[r] * kr;
        dq_row[r * dq_step] = s.dq[r][d] + s.dp[r][r] * kr;
        dk_row[r * dk_step] = dk;
      }
    }
  }
  if constexpr (delta) {
    if (args.dbeta.data())
      for (int r = tid; r < n; r += S::threads) {
        const beta_partials<float> bp = Rule::beta_derivatives(args.in, b, t0 + r, hv, s.cf.sq[r]);
        store_value(args.dbeta, s.dbeta[r] * bp.d_input, b, t0 + r, hv);
      }
  }
}

/// dq = scale Σ_hv dq_parts and dk = Σ_hv dk_parts over the value heads of each q/k head, in
/// the input type: one thread per 8 elements of a row (load8 / store8: 16-byte loads and
/// stores where the rows allow), the value heads added in order, so the same bits on every
/// call. `rows` = B T H.
template <class Rule, class T, int K>
__global__ void __launch_bounds__(256) group_sum_kernel(backward_args<Rule, T> args, index_t rows) {
  static_assert(K % 8 == 0, "whole pieces of 8 per row");
  constexpr int pieces = K / 8;
  const tensor_view<const float, 4> dq_parts(args.dq_parts), dk_parts(args.dk_parts);
  const index_t H = args.grads.dq.extent(2), T_ = args.grads.dq.extent(1);
  for (index_t e = index_t(blockIdx.x) * blockDim.x + threadIdx.x; e < rows * pieces; e += index_t(gridDim.x) * blockDim.x) {
    const index_t row = e / pieces, h = row % H, bt = row / H, t = bt % T_, b = bt / T_, d0 = (e % pieces) * 8;
    float sq[8] = {}, sk[8] = {}, q[8], k[8];
    for (index_t hv = h * args.group; hv < (h + 1) * args.group; ++hv) {
      load8(dq_parts, b, t, hv, d0, q), load8(dk_parts, b, t, hv, d0, k);
#pragma unroll
      for (int i = 0; i < 8; ++i) sq[i] += q[i], sk[i] += k[i];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) sq[i] *= args.scale;
    store8(args.grads.dq, b, t, h, d0, sq), store8(args.grads.dk, b, t, h, d0, sk);
  }
}

}  // namespace linattn::cuda::detail
