// SPDX-License-Identifier: MIT
/// \file
/// Backward pass 4, the gradients, independent for every chunk and q/k head: given the chunk's
/// start state H0 (pass 2) and the gradient dH of its end state (pass 3), per value head of
/// the group (docs/backward.md#chunkwise; U = V for the additive family):
///
///   additive:  dU = diag(e) K dH + P^T dO = dV
///   delta:     U = T X and dY = M^T dU as the state passes wrote them,
///              dX = dV = diag(beta) dY,  dA = -stril(dY U^T),  W = dY H0^T,
///              dbeta_r = dY_r . V_r - Gam_r K_r . W_r + sum_i dA_ri G_ri,  dG = diag(beta) dA ⊙ D
///   dP = (dO U^T ⊙ D) causal
///   dQ = diag(Gam) dO H0^T + dP K
///   dK = diag(e) U dH^T + dP^T Q  [ - diag(beta Gam) W + (dG + dG^T) K ]
///   dg_t = sum_{r>=t} (Q_r . dQx_r + K_r . dKx_r) + sum_{i<t} (K_i . dKs_i + colZ_i - rowZ_i)
///          + Gam_{n-1} <dH, H0>,      Z = dP ⊙ P + dA ⊙ A (strictly lower)
///
/// (dY_r . X_r with X = V - diag(Gam) K H0 is dY_r . V_r - Gam_r K_r . W_r: the W the dK term
/// needs anyway gives it, so no product forms X.) The delta rules thus take three products with
/// a state (dO H0^T, U dH^T, dY H0^T) and no solve; the additive ones take dO H0^T, K dH, U dH^T.
/// dq and dk of a q/k head sum over its value heads in a fixed order, so the result is the
/// same on every run. The products are tensor-core products of fp32 tiles (gradient_products,
/// tile_product.cuh: for bf16 inputs register mma.sync products, each operand split into two
/// bf16 terms, three products per step; for fp16 inputs WMMA with one TF32 product per step,
/// for fp32 three), except those with H0 or dH, which state_products.cuh takes in three
/// phases (bf16 inputs: mma.sync from the state staged in shared memory as bf16; H0 stays there
/// for its second phase, and <dH, H0> is summed as dH is staged). For bf16 inputs q, k and dO
/// are kept as loaded in bf16 only (loaded_rows), and so are the delta family's U and dY as the
/// state passes wrote them (hand_over_tiles): exact, so the products read them by ldmatrix
/// with no lo terms (one product per step fewer; none for K K^T and dY U^T), and the [C, K],
/// [C, V] fp32 tiles take rows of K + 8 floats (row_pad), which the products' 8-byte fragment
/// loads read without bank conflicts.
#pragma once

#include <tuple>

#include "../../tile/tile_product.cuh"
#include "chunk_factors.cuh"
#include "state_products.cuh"

namespace linattn::cuda::detail {

/// The input rows pass 4 keeps. For bf16 inputs: q (unscaled), k and dO as loaded, in bf16,
/// whose values they hold exactly; its mma.sync products read them by ldmatrix with no
/// conversion and no lo terms (the scale goes into those products' epilogues), and its
/// elementwise uses convert them as they read them. For other input types: fp32 tiles (rows of
/// ldk and ldv floats), which the WMMA products read.
template <class T, int K, int V, int ldk, int ldv>
struct loaded_rows {
  static constexpr bool exact = false;
  float q[backward_chunk][ldk];     // [C, K]  scale q
  float k[backward_chunk][ldk];     // [C, K]
  float dout[backward_chunk][ldv];  // [C, V]  dO
};

template <int K, int V, int ldk_, int ldv_>  // the fp32 tiles' strides, unused: bf16 rows take their own
struct loaded_rows<__nv_bfloat16, K, V, ldk_, ldv_> {
  static constexpr bool exact = true;
  static constexpr int ldk = K + 8, ldv = V + 8;  // 16-byte aligned rows, conflict-free ldmatrix
  __nv_bfloat16 q[backward_chunk][ldk];           // [C, K]  q (not scaled)
  __nv_bfloat16 k[backward_chunk][ldk];           // [C, K]
  __nv_bfloat16 dout[backward_chunk][ldv];        // [C, V]
};

/// A tile as a product operand: its first element and row stride.
template <class E>
struct tile_ref {
  const E* p;
  int ld;
  /// The tile for the state jobs: as exact bf16 rows (a16, b16) or as an fp32 tile; null when
  /// it is the other kind.
  __device__ const __nv_bfloat16* bf16_rows() const {
    if constexpr (std::is_same_v<E, __nv_bfloat16>) return p;
    else return nullptr;
  }
  __device__ const float* fp32_rows() const {
    if constexpr (std::is_same_v<E, float>) return p;
    else return nullptr;
  }
};

/// U and dY of the delta family as the state passes hand them over (workspace_hand_over_t):
/// for bf16 inputs bf16 rows, which every product reads exactly by ldmatrix (no lo terms, no
/// rounding here); else fp32 tiles (rows of ldv floats).
template <class T, int C, int V, int ldv>
struct hand_over_tiles {
  using element = float;
  static constexpr int ld = ldv;
  float u[C][ld];   // [C, V]  U
  float dy[C][ld];  // [C, V]  dY
};

template <int C, int V, int ldv_>  // the fp32 tiles' stride, unused: bf16 rows take their own
struct hand_over_tiles<__nv_bfloat16, C, V, ldv_> {
  using element = __nv_bfloat16;
  static constexpr int ld = V + 8;  // 16-byte aligned rows, conflict-free ldmatrix
  __nv_bfloat16 u[C][ld];           // [C, V]  U
  __nv_bfloat16 dy[C][ld];          // [C, V]  dY
};

template <class T, int K, int V>
struct chunk_gradients_storage {
  static constexpr state_staging staging = state_staging_for<T>;
  // 16 warps: one block (213 KiB; bf16 194 KiB) per multiprocessor
  static constexpr int warps = 16, threads = 32 * warps;
  static constexpr int C = backward_chunk, pad = row_pad<gradient_products<T>>, ldk = K + pad, ldv = V + pad;
  static constexpr int ldc = chunk_corrections::ld;
  float x[C][ldv];     // [C, V]  V
  float du[C][ldv];    // [C, V]  dU (additive), dX (delta family): dV
  hand_over_tiles<T, C, V, ldv> hand;  // U and dY (delta family, from passes 2 and 3)
  float dq[C][ldk];    // [C, K]  dQ summed over the value heads
  float dk[C][ldk];    // [C, K]  dK summed over the value heads
  state_phase_storage<staging, K, V> st;  // what the products with H0 and dH need (bf16: H0 resident)
  float p[C][ldc];     // [C, C]  P
  operand_tile<gradient_products<T>, C, C> dp;  // [C, C]  dP ⊙ D (the left operand of dP K and dP^T Q)
  float z[C][ldc];     // [C, C]  Z
  float da[C][ldc];    // [C, C]  dA, then dG
  float g[C][ldc];     // [C, C]  G
  operand_tile<gradient_products<T>, C, C> dgs;  // [C, C]  dG + dG^T (the left operand of (dG + dG^T) K)
  chunk_coefficients cf;
  float dgv[C], w[C], dbeta[C], red[warps];
  float beta_gam[C], key_w[C];  // beta Gam; K_r . W_r (delta family)
  float stage[stage_warps<gradient_products<T>, warps>][stage_floats];  // WMMA products only
  loaded_rows<T, K, V, ldk, ldv> in;  // q, k, dO: bf16 as loaded, else fp32 tiles
};

/// Writes rows r < n of a [C, D] fp32 tile (ld floats per row), times `scale`, to
/// x(b, t0 + r, h, 0..D): per thread and step, 16-byte loads of the tile and one 16-byte store
/// of 16 / sizeof(T) elements where x's rows are contiguous and 16-byte aligned (as chunk_rows
/// reads them) and so are the tile's, else element by element. The same values either way.
template <int D, class T>
__device__ void store_tile(const tensor_view<T, 4>& x, const float* tile, int ld, index_t b, index_t t0, int n, index_t h,
                           float scale = 1.0f) {
  constexpr int vec = 16 / int(sizeof(T)), per_row = D / vec;
  static_assert(D % vec == 0 && vec % 4 == 0, "whole 16-byte pieces per row");
  const bool direct = x.stride(3) == 1 && (x.stride(1) * index_t(sizeof(T))) % 16 == 0 &&
                      (reinterpret_cast<std::uintptr_t>(&x(b, t0, h, 0)) % 16) == 0 && ld % 4 == 0 &&
                      (reinterpret_cast<std::uintptr_t>(tile) % 16) == 0;
  if (direct) {
    union piece {
      uint4 raw;
      T e[vec];
    };
    for (int e = int(threadIdx.x); e < n * per_row; e += int(blockDim.x)) {
      const int r = e / per_row, c = (e % per_row) * vec;
      const float4* row = reinterpret_cast<const float4*>(tile + r * ld + c);
      piece p;
#pragma unroll
      for (int m = 0; m < vec / 4; ++m) {
        const float4 y = row[m];
        p.e[4 * m] = from_float<T>(scale * y.x), p.e[4 * m + 1] = from_float<T>(scale * y.y);
        p.e[4 * m + 2] = from_float<T>(scale * y.z), p.e[4 * m + 3] = from_float<T>(scale * y.w);
      }
      *reinterpret_cast<uint4*>(&x(b, t0 + r, h, c)) = p.raw;
    }
  } else {
    for (int e = int(threadIdx.x); e < n * D; e += int(blockDim.x)) {
      const int r = e / D, c = e % D;
      x(b, t0 + r, h, c) = from_float<T>(scale * tile[r * ld + c]);
    }
  }
}

template <class Rule, class T, int K, int V>
__global__ void __launch_bounds__(chunk_gradients_storage<T, K, V>::threads) chunk_gradients_kernel(backward_args<Rule, T> args) {
  using S = chunk_gradients_storage<T, K, V>;
  using P = gradient_products<T>;
  static_assert(std::is_same_v<typename backward_args<Rule, T>::state_type, staged_state_t<S::staging>>,
                "pass 4 stages the states in the type passes 2 and 3 write");
  using H = typename decltype(S::hand)::element;
  static_assert(!corrects<Rule> || std::is_same_v<typename backward_args<Rule, T>::hand_over_type, H>,
                "pass 4 reads U and dY in the type passes 2 and 3 write");
  constexpr int C = S::C, ldk = S::ldk, ldv = S::ldv, ldc = S::ldc;
  constexpr bool gated = Rule::decay == decay_kind::scalar, delta = corrects<Rule>;
  constexpr bool resident_h0 = S::staging == state_staging::bf16_halves;  // H0 stays in shared memory
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& s = *reinterpret_cast<S*>(dynamic_smem);
  const int ci = int(blockIdx.x), tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const span c = args.chunk_at(blockIdx.x);
  const index_t h = blockIdx.y, b = c.b, t0 = c.start;
  const int n = c.length;
  float* stage = s.stage[0];
  const auto& cf = s.cf;
  // q, k and dO as product operands (q times `qscale` in the products' epilogues)
  constexpr bool exact_rows = decltype(s.in)::exact;
  const auto operands = [&] {
    if constexpr (exact_rows)
      return std::tuple{tile_ref<T>{s.in.q[0], s.in.ldk}, tile_ref<T>{s.in.k[0], s.in.ldk},
                        tile_ref<T>{s.in.dout[0], s.in.ldv}};
    else
      return std::tuple{tile_ref<float>{s.in.q[0], ldk}, tile_ref<float>{s.in.k[0], ldk},
                        tile_ref<float>{s.in.dout[0], ldv}};
  }();
  const auto &queries = std::get<0>(operands), &keys = std::get<1>(operands), &douts = std::get<2>(operands);
  const float qscale = exact_rows ? args.scale : 1.0f;
  // U (the additive family: V) and dY as product operands
  const tile_ref<H> hand_u{s.hand.u[0], s.hand.ld}, hand_dy{s.hand.dy[0], s.hand.ld};
  const auto values = [&] {
    if constexpr (delta) return hand_u;
    else return tile_ref<float>{s.x[0], ldv};
  }();

  // the value head's log gates (warp 0, one token per lane), betas (every warp) and rows, issued ahead
  using gate_type = decltype(lane_gate_ahead(args, b, t0, n, h * args.group));
  gate_type gate = warp == 0 ? lane_gate_ahead(args, b, t0, n, h * args.group) : gate_type{};
  [[maybe_unused]] auto beta = lane_beta_ahead(args, b, t0, n, h * args.group);
  chunk_rows<V, S::threads, T> vr, dr;
  vr.issue(args.in.v, b, t0, n, h * args.group), dr.issue(args.dout, b, t0, n, h * args.group);
  {
    chunk_rows<K, S::threads, T> qr, kr;  // all four loads in flight at once
    qr.issue(args.in.q, b, t0, n, h), kr.issue(args.in.k, b, t0, n, h);
    if constexpr (exact_rows) qr.store_as_loaded(s.in.q[0], s.in.ldk), kr.store_as_loaded(s.in.k[0], s.in.ldk);
    else qr.store(s.in.q[0], ldk, args.scale), kr.store(s.in.k[0], ldk);
  }
  for (int e = tid; e < C * ldk; e += int(blockDim.x)) s.dq[0][e] = 0.0f, s.dk[0][e] = 0.0f;

  for (index_t hv = h * args.group; hv < (h + 1) * args.group; ++hv) {
    const auto* H0 = args.state_at(args.states, ci, hv, K, V);  // [K, V]
    const auto* dH = args.state_at(args.state_grads, ci, hv, K, V);
    state_pieces<S::staging, K, V, S::threads> pieces;  // the states' halves on their way to shared memory
    pieces.issue(H0, 0);  // in flight over the scores
    if constexpr (delta) issue_hand_over<C, V, S::threads>(s.hand.u[0], s.hand.dy[0], s.hand.ld, args, b, t0, n, hv);
    chunk_decays(gate.value(), s.cf);
    vr.store(s.x[0], ldv);
    if constexpr (exact_rows) dr.store_as_loaded(s.in.dout[0], s.in.ldv);
    else dr.store(s.in.dout[0], ldv);
    __syncthreads();
    if constexpr (delta) {
      chunk_betas<K>(args, s.cf, keys.p, keys.ld, b, t0, n, hv, beta);
      chunk_scores_gram<P, K>(queries.p, queries.ld, keys.p, keys.ld, cf, s.p[0], s.g[0], stage, qscale);
    } else {
      chunk_scores<P, K>(queries.p, queries.ld, keys.p, keys.ld, cf, s.p[0], stage, qscale);
      __syncthreads();
    }
    // with H0 (which the bf16 staging keeps): dQ = diag(Gam) dO H0^T and its dg term
    state_phase<S::staging, P, K, V, S::threads>(
        s.st, pieces, state_slot::resident_staged, H0, dH, nullptr,
        {douts.fp32_rows(), ldv, s.dq[0], queries.fp32_rows(), ldk, cf.gam, 1.0f, s.dgv, false, douts.bf16_rows(),
         douts.ld, queries.bf16_rows(), queries.ld, qscale},
        stage);
    if constexpr (delta) {  // U and dY (read from here on), in flight over the scores and the phase with H0
      wait_copies<0>();
      __syncthreads();
    }
    // with dH: dU = diag(e) K dH (additive; then + P^T dO); dK = diag(e) U dH^T (the state
    // write) and its dg term; with the bf16 staging, each warp's part of <dH, H0> (gated rules)
    // as dH is staged
    {
      const state_rows_job du{keys.fp32_rows(), keys.ld, s.du[0], ldv, cf.e, 1.0f, true, keys.bf16_rows(), keys.ld};
      state_phase<S::staging, P, K, V, S::threads>(
          s.st, pieces, state_slot::streamed, dH, nullptr, delta ? nullptr : &du,
          {values.fp32_rows(), values.ld, s.dk[0], keys.fp32_rows(), ldk, cf.e, 1.0f, s.w, false, values.bf16_rows(),
           values.ld, keys.bf16_rows(), keys.ld},
          stage, gated && resident_h0 ? s.red : nullptr);
    }
    // dP = dO U^T: Z = dP ⊙ P strictly below the diagonal, then dP ⊙ D, causal (additive: and
    // dU += P^T dO)
    const auto dp_epilogue = [&]<int W>(int r, int j, const float (&x)[W]) {
      float d[W];
#pragma unroll
      for (int e = 0; e < W; ++e) {
        const int i = j + e;
        s.z[r][i] = i < r ? x[e] * s.p[r][i] : 0.0f;
        d[e] = i < r ? x[e] * decay_between(cf, r, i) : i == r ? x[e] : 0.0f;
      }
#pragma unroll
      for (int e = 0; e < W; e += 2) s.dp.store(r, j + e, d[e], d[e + 1]);
    };
    const auto da_epilogue = tile_epilogue<tile_update::negated_strictly_lower>(s.da);  // dA = -stril(dY U^T)
    if constexpr (is_mma_16bit<P>) {
      // side by side on the two halves of the warps: dO U^T (8 units of V / 16 k-steps) on the
      // lower half; on the upper half dY U^T (delta family: the same shape) or P^T dO (additive:
      // 16 units of 2 k-steps, about as much work)
      using E = typename P::type;
      constexpr int half = S::warps / 2;
      warp_gemm<E, P::terms, row_major, col_major, C, C, V, false, dout_u_exact<delta>>(
          douts.p, douts.ld, values.p, values.ld, dp_epilogue, 0, half);
      if constexpr (delta)
        warp_gemm<E, P::terms, row_major, col_major, C, C, V>(hand_dy.p, hand_dy.ld, hand_u.p, hand_u.ld, da_epilogue,
                                                              half, half);
      else
        warp_gemm<E, P::terms, col_major, row_major, C, V, C, false, exact_operands::b>(
            s.p[0], ldc, douts.p, douts.ld, tile_epilogue<tile_update::add>(s.du), half, half);
      __syncthreads();
    } else {
      if constexpr (!delta)
        tile_product<P, col_major, row_major, C, V, C, false, exact_operands::b>(s.p[0], ldc, douts.p, douts.ld, stage,
            tile_epilogue<tile_update::add>(s.du));
      tile_product_split_k<P, row_major, col_major, C, C, V, dout_u_exact<delta>>(douts.p, douts.ld, values.p,
                                                                                  values.ld, stage, dp_epilogue);
      __syncthreads();
      if constexpr (delta) {
        tile_product_split_k<P, row_major, col_major, C, C, V>(hand_dy.p, hand_dy.ld, hand_u.p, hand_u.ld, stage,
                                                               da_epilogue);
        __syncthreads();
      }
    }
    if constexpr (delta) {
      // dbeta_r = dY_r . V_r + sum_i dA_ri G_ri (- Gam_r K_r . W_r after the last phase);
      // Z += dA ⊙ A; dA becomes dG = diag(beta) dA ⊙ D; dX = diag(beta) dY
      for (int r = warp; r < C; r += int(blockDim.x) / 32) {
        const float br = cf.beta[r];
        float acc = 0.0f;
        for (int i = lane; i < V; i += 32) {
          const float y = to_float(hand_dy.p[r * hand_dy.ld + i]);
          acc += y * s.x[r][i];
          s.du[r][i] = br * y;
        }
        const float a = s.da[r][lane], g = s.g[r][lane];
        acc += a * g;
        if constexpr (gated) s.z[r][lane] += br * a * g;
        s.da[r][lane] = br * a * (gated && lane < r ? decay_between(cf, r, lane) : 1.0f);
        acc = warp_sum(acc);
        if (lane == 0) s.dbeta[r] = acc, s.beta_gam[r] = br * cf.gam[r];
      }
      __syncthreads();
      for (int e = tid; e < C * C / 2; e += int(blockDim.x)) {
        const int r = e / (C / 2), i = 2 * (e % (C / 2));
        s.dgs.store(r, i, s.da[r][i] + s.da[i][r], s.da[r][i + 1] + s.da[i + 1][r]);  // dG + dG^T
      }
    }
    store_tile<V>(args.grads.dv, s.du[0], ldv, b, t0, n, hv);
    if (hv + 1 < (h + 1) * args.group) vr.issue(args.in.v, b, t0, n, hv + 1), dr.issue(args.dout, b, t0, n, hv + 1);
    // dQ += dP K, dK += dP^T Q
    tile_product<P, row_major, row_major, C, K, C, true, exact_operands::b>(s.dp.operand(), s.dp.ld, keys.p, keys.ld,
        stage, tile_epilogue<tile_update::add>(s.dq));
    tile_product<P, col_major, row_major, C, K, C>(s.dp.operand(), s.dp.ld, queries.p, queries.ld, stage,
        tile_epilogue<tile_update::add>(s.dk, qscale));
    __syncthreads();
    if constexpr (delta) {
      // with H0 again (resident with the bf16 staging): W = dY H0^T, dK -= diag(beta Gam) W with
      // its dg term, K_r . W_r for dbeta; then (dG + dG^T) K and beta's dependence on ||k||^2
      state_phase<S::staging, P, K, V, S::threads>(
          s.st, pieces, state_slot::resident, H0, nullptr, nullptr,
          {hand_dy.fp32_rows(), hand_dy.ld, s.dk[0], keys.fp32_rows(), ldk, s.beta_gam, -1.0f, s.dgv, true,
           hand_dy.bf16_rows(), hand_dy.ld, keys.bf16_rows(), keys.ld, 1.0f, s.key_w},
          stage);
      tile_product<P, row_major, row_major, C, K, C, false, exact_operands::b>(s.dgs.operand(), s.dgs.ld, keys.p,
          keys.ld, stage, tile_epilogue<tile_update::add>(s.dk));
      __syncthreads();
      const auto& dbeta_out = args.dbeta;
      for (int r = warp; r < n; r += int(blockDim.x) / 32) {
        const float db = s.dbeta[r] - cf.gam[r] * s.key_w[r];
        const beta_partials<float> bp = Rule::beta_derivatives(args.in, b, t0 + r, hv, cf.sq[r]);
        const float f = 2.0f * db * bp.d_key_sqnorm;
        if (f != 0.0f)
          for (int i = lane; i < K; i += 32) s.dk[r][i] += f * to_float(keys.p[r * keys.ld + i]);
        if (lane == 0 && dbeta_out.data()) store_value(dbeta_out, db * bp.d_input, b, t0 + r, hv);
      }
      __syncthreads();
    }
    if constexpr (gated) {
      // Gam_{n-1} <dH, H0>, in a fixed order (bf16 staging: the warps' parts from dH's phase)
      if constexpr (!resident_h0) {
        const float part = warp_sum(state_dot_part<K, V, S::threads>(dH, H0));
        if (lane == 0) s.red[warp] = part;
      }
      // w_i += colZ_i - rowZ_i
      for (int i = warp; i < C; i += int(blockDim.x) / 32) {
        float d = (lane > i ? s.z[lane][i] : 0.0f) - (lane < i ? s.z[i][lane] : 0.0f);
        d = warp_sum(d);
        if (lane == 0) s.w[i] += d;
      }
      __syncthreads();
      // dg_t = (dgv_t + ... + dgv_{C-1}) + (end + w_0 + ... + w_{t-1}): warp 0, token t in lane t,
      // as warp scans (a fixed order)
      if (warp == 0) {
        static_assert(S::warps <= 32, "one warp's partial sum per lane");
        const float end = warp_sum(lane < S::warps ? s.red[lane] : 0.0f) * cf.gam[C - 1];
        const float suffix = warp_suffix_sum(s.dgv[lane], lane);
        const float w_upto = warp_prefix_sum(s.w[lane], lane), w_before = __shfl_up_sync(0xffffffffu, w_upto, 1);
        if (lane < n) store_value(args.grads.dg, suffix + (end + (lane > 0 ? w_before : 0.0f)), b, t0 + lane, hv);
      }
    }
    if (hv + 1 < (h + 1) * args.group) {
      if (warp == 0) gate = lane_gate_ahead(args, b, t0, n, hv + 1);
      beta = lane_beta_ahead(args, b, t0, n, hv + 1);
    }
    __syncthreads();
  }
  store_tile<K>(args.grads.dq, s.dq[0], ldk, b, t0, n, h, args.scale);
  store_tile<K>(args.grads.dk, s.dk[0], ldk, b, t0, n, h);
}

}  // namespace linattn::cuda::detail
