// SPDX-License-Identifier: MIT
/// \file
/// The stages every backward kernel shares, on one chunk of n <= C = backward_chunk tokens in
/// fp32 shared memory (docs/backward.md has the derivation): the rows of a chunk as fp32
/// tiles, the chunk-local log-gate cumsum b with Gam = exp(b) and e = exp(b_{n-1} - b), the
/// delta rules' betas, the causal scores P = Q K^T ⊙ D and, for the delta rules,
///
///   G = stril(K K^T ⊙ D),  M = (I + diag(beta) G)^{-1},  T = M diag(beta)        [C, C]
///
/// with D_ri = exp(b_r - b_i) (i <= r). Rows past n are zero and b stays constant there, so
/// they add nothing to any product.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../../tile/async_copy.cuh"
#include "../../tile/block_gemm.cuh"
#include "../../tile/load_store.cuh"
#include "../../tile/tile_product.cuh"
#include "../../tile/scalar.cuh"
#include "../../tile/warp_rows_store.cuh"
#include "../../tile/warp_sums.cuh"
#include "../rule_coefficients.cuh"
#include "backward_args.cuh"

namespace linattn::cuda::detail {

/// The precision of the backward's fp32 products for inputs of type T: three TF32 products
/// (fp32 accuracy) for float inputs; one for 16-bit inputs, whose own rounding is coarser.
template <class T>
using backward_products = std::conditional_t<std::is_same_v<T, float>, float, single_tf32>;

/// The precision of pass 4's products of fp32 tiles (tile_product.cuh): for bf16 inputs,
/// mma.sync with each operand split into two bf16 terms, three products per step (operands
/// rounded once to bf16 measured the largest bf16 error at 1.25e-2 against 6.5e-3 with one
/// TF32 product: Longhorn's dbeta, whose sums cancel); fp16 inputs keep one TF32 product
/// (fp16 terms of gradient tiles could leave its range), fp32 three.
template <class T>
using gradient_products =
    std::conditional_t<std::is_same_v<T, __nv_bfloat16>, mma_16bit<__nv_bfloat16, 3>, backward_products<T>>;

/// The per-token coefficients of a chunk.
struct chunk_coefficients {
  float b[backward_chunk];     // [C]  chunk-local cumsum of the floored log gates (constant past n)
  float gam[backward_chunk];   // [C]  exp(b)
  float e[backward_chunk];     // [C]  exp(b_{n-1} - b)
  float beta[backward_chunk];  // [C]  write strengths (delta family; 0 past n)
  float sq[backward_chunk];    // [C]  ||k||^2 (delta family)
};

/// The delta rules' chunk matrices (ld = C + 4 floats per row).
struct chunk_corrections {
  static constexpr int ld = backward_chunk + 4;
  float g[backward_chunk][ld];  // [C, C]  G = stril(K K^T ⊙ D)
  float m[backward_chunk][ld];  // [C, C]  M = (I + diag(beta) G)^{-1}
  float t[backward_chunk][ld];  // [C, C]  T = M diag(beta)
};

/// The rows of one chunk of a `[B, T, heads, D]` view, Cols columns from c0, held in
/// registers between `issue` (the loads, all in flight at once: 16-byte loads where the rows
/// are contiguous and aligned, else element by element) and `store` (into an fp32 tile, each
/// row times a factor). Rows past n are zero. A block of `Threads` threads shares the work;
/// issuing the next chunk's rows before computing on the current one hides the loads.
template <int Cols, int Threads, class T>
struct chunk_rows {
  static constexpr int vec = 16 / int(sizeof(T));  // elements per 16-byte piece
  static constexpr int per_row = Cols / vec, pieces = backward_chunk * per_row;
  static constexpr int iters = (pieces + Threads - 1) / Threads;
  static_assert(Cols % vec == 0, "whole 16-byte pieces per row");
  union piece {
    uint4 raw;
    T e[vec];
  };
  piece p[iters];

  __device__ void issue(const tensor_view<const T, 4>& x, index_t b, index_t t0, int n, index_t h, index_t c0 = 0) {
    const bool direct = x.stride(3) == 1 && (x.stride(1) * index_t(sizeof(T))) % 16 == 0 &&
                        (reinterpret_cast<std::uintptr_t>(&x(b, t0, h, c0)) % 16) == 0;
#pragma unroll
    for (int i = 0; i < iters; ++i) {
      const int e = int(threadIdx.x) + i * Threads, r = e / per_row, c = (e % per_row) * vec;
      if (e >= pieces || r >= n) {
        p[i].raw = make_uint4(0, 0, 0, 0);
      } else if (direct) {
        p[i].raw = *reinterpret_cast<const uint4*>(&x(b, t0 + r, h, c0 + c));
      } else {
#pragma unroll
        for (int m = 0; m < vec; ++m) p[i].e[m] = x(b, t0 + r, h, c0 + c + m);
      }
    }
  }

  /// tile[r][c] = factor(r) * x(b, t0 + r, h, c0 + c) (rows past n: 0): 16-byte stores where
  /// the tile's rows are 16-byte aligned (a thread's consecutive floats; element by element they
  /// would put its lanes' stores 8 floats apart, an 8-way bank conflict), else element by element.
  template <class Factor>
  __device__ void store(float* tile, int ld, Factor&& factor) const {
    const bool wide = ld % 4 == 0 && reinterpret_cast<std::uintptr_t>(tile) % 16 == 0;
#pragma unroll
    for (int i = 0; i < iters; ++i) {
      const int e = int(threadIdx.x) + i * Threads, r = e / per_row, c = (e % per_row) * vec;
      if (pieces % Threads != 0 && e >= pieces) break;
      const float f = factor(r);
      if constexpr (vec % 4 == 0) {
        if (wide) {
#pragma unroll
          for (int m = 0; m < vec; m += 4)
            *reinterpret_cast<float4*>(tile + r * ld + c + m) =
                make_float4(f * to_float(p[i].e[m]), f * to_float(p[i].e[m + 1]), f * to_float(p[i].e[m + 2]),
                            f * to_float(p[i].e[m + 3]));
          continue;
        }
      }
#pragma unroll
      for (int m = 0; m < vec; ++m) tile[r * ld + c + m] = f * to_float(p[i].e[m]);
    }
  }
  __device__ void store(float* tile, int ld, float scale = 1.0f) const {
    store(tile, ld, [scale](int) { return scale; });
  }
  /// tile[r][c] = x(b, t0 + r, h, c0 + c) as loaded, in T (rows past n: 0): one 16-byte store
  /// per piece, so the rows of `tile` (ld elements) are 16-byte aligned.
  __device__ void store_as_loaded(T* tile, int ld) const {
#pragma unroll
    for (int i = 0; i < iters; ++i) {
      const int e = int(threadIdx.x) + i * Threads, r = e / per_row, c = (e % per_row) * vec;
      if (pieces % Threads != 0 && e >= pieces) break;
      *reinterpret_cast<uint4*>(tile + r * ld + c) = p[i].raw;
    }
  }
};

/// The rows a per-chunk backward kernel starts from: q and k of q/k head h, v and dO of value
/// head hv, all their loads in flight at once between `issue` and `store` (q times the scale).
template <int K, int V, int Threads, class T>
struct chunk_input_rows {
  chunk_rows<K, Threads, T> q, k;
  chunk_rows<V, Threads, T> v, dout;

  template <class Rule>
  __device__ void issue(const backward_args<Rule, T>& args, index_t b, index_t t0, int n, index_t hv) {
    const index_t h = hv / args.group;
    q.issue(args.in.q, b, t0, n, h), k.issue(args.in.k, b, t0, n, h);
    v.issue(args.in.v, b, t0, n, hv), dout.issue(args.dout, b, t0, n, hv);
  }
  __device__ void store(float* queries, float* keys, int ldk, float* values, float* douts, int ldv, float scale) const {
    q.store(queries, ldk, scale), k.store(keys, ldk);
    v.store(values, ldv), dout.store(douts, ldv);
  }
  /// The rows as loaded (q not scaled), in T.
  __device__ void store_as_loaded(T* queries, T* keys, int ldk, T* values, T* douts, int ldv) const {
    q.store_as_loaded(queries, ldk), k.store_as_loaded(keys, ldk);
    v.store_as_loaded(values, ldv), dout.store_as_loaded(douts, ldv);
  }
};

/// The rows a state pass reads: rows the backward's workspace holds (fp32 or bf16) when
/// `Workspace`, else the caller's input rows. The row type may differ, so the pick is made at
/// compile time.
template <bool Workspace, class W, class T>
__device__ auto workspace_or_input(const tensor_view<W, 4>& workspace, const tensor_view<const T, 4>& input) {
  if constexpr (Workspace) return tensor_view<const W, 4>(workspace);
  else return input;
}

/// An epilogue for block_gemm or tile_product (any width W) that writes rows r < n of its
/// result to x(b, t0 + r, hv, :), rounded to x's element type (fp32 or bf16).
template <class E>
__device__ auto row_writer(const tensor_view<E, 4>& x, index_t b, index_t t0, index_t hv, int n) {
  return [=]<int W>(int r, int j, const float (&v)[W]) {
    if (r < n) {
      E* d = &x(b, t0 + r, hv, j);
      if constexpr (W % 2 == 0 && std::is_same_v<E, __nv_bfloat16>) {  // 4-byte pairs (j even)
#pragma unroll
        for (int e = 0; e < W; e += 2) *reinterpret_cast<__nv_bfloat162*>(d + e) = __floats2bfloat162_rn(v[e], v[e + 1]);
      } else {
#pragma unroll
        for (int e = 0; e < W; ++e) d[e] = from_float<E>(v[e]);
      }
    }
  };
}

/// row_writer for bf16 workspace rows (256-byte aligned spans, rows of K or V elements, whole
/// 16-byte pieces) that also takes mma.sync products a unit at a time (warp_gemm's unit
/// epilogue): each warp's [16, 8 NT] unit goes through its own [16, ld] slice of `stage` and
/// leaves in 16-byte pieces (store_warp_rows), whole 32-byte sectors, where pairs from the
/// fragments each write 4 bytes of 8 rows, half a sector per row, and the L2 takes twice the
/// write requests the bytes need (bench/cuda/NOTES.md, session 52). Each warp's slice is its
/// own; the writer waits for the warp's previous unit to leave it before the next goes in.
struct staged_row_writer {
  static constexpr int ld = 24;  // 48-byte rows: the fragments' pair stores free of bank conflicts
  /// The stage's elements for a block of `warps` warps.
  static constexpr int stage_elements(int warps) { return 16 * ld * warps; }
  tensor_view<__nv_bfloat16, 4> x;
  index_t b, t0, hv;
  int n;
  __nv_bfloat16* stage;  // [warps][16][ld]

  template <int W>
  __device__ void operator()(int r, int j, const float (&v)[W]) const {
    row_writer(x, b, t0, hv, n)(r, j, v);
  }
  template <int NT>
  __device__ void unit(int r0, int n0, const float (&acc)[NT][4]) const {
    static_assert(8 * NT <= ld, "a unit's columns fit a stage row");
    const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
    __syncwarp();  // the warp's previous unit has left the stage
    store_warp_rows<__nv_bfloat16, NT, true>(acc, stage + warp * 16 * ld, ld, lane, n - r0, x, b, t0 + r0, hv, n0);
  }
};

/// The exact operands (warp_gemm.cuh) of pass 4's dP = dO U^T: dO as loaded, and U too where it
/// is V as loaded (the additive family, no delta correction).
template <bool Delta>
inline constexpr exact_operands dout_u_exact = Delta ? exact_operands::a : exact_operands::both;

/// How an epilogue into a tile (`tile_epilogue`) combines the product with the tile.
enum class tile_update { assign, add, subtract, negated_strictly_lower };

/// An epilogue for block_gemm or tile_product (any width W) into the rows of an fp32 tile in
/// shared memory (ld floats per row): tile[r][j] = the result, += it or -= it; or
/// (negated_strictly_lower, a [C, C] tile) minus the result below the diagonal (j < r) and 0 on
/// and above it. The result is taken times `scale` first (1: as it is, the same bits).
template <tile_update U = tile_update::assign, int ld>
__device__ auto tile_epilogue(float (*tile)[ld], float scale = 1.0f) {
  return [tile, scale]<int W>(int r, int j, const float (&v)[W]) {
    float x[W];
#pragma unroll
    for (int e = 0; e < W; ++e) x[e] = scale * v[e];
    if constexpr (W == 2 && U != tile_update::negated_strictly_lower) {  // one 8-byte access (j and ld even)
      float2& o = *reinterpret_cast<float2*>(&tile[r][j]);
      if constexpr (U == tile_update::assign) o = make_float2(x[0], x[1]);
      else if constexpr (U == tile_update::add) o = make_float2(o.x + x[0], o.y + x[1]);
      else o = make_float2(o.x - x[0], o.y - x[1]);
    } else {
#pragma unroll
      for (int e = 0; e < W; ++e) {
        if constexpr (U == tile_update::assign) tile[r][j + e] = x[e];
        else if constexpr (U == tile_update::add) tile[r][j + e] += x[e];
        else if constexpr (U == tile_update::subtract) tile[r][j + e] -= x[e];
        else tile[r][j + e] = j + e < r ? -x[e] : 0.0f;
      }
    }
  };
}

/// h[i][j] = x(n, hv, i, v0 + j), the [K, BV] block of a state view ([N, HV, K, V]), or 0 where
/// x is not given; the whole block copies, the caller synchronises.
template <int K, int BV, int ld>
__device__ void load_state_block(float (*h)[ld], const tensor_view<const float, 4>& x, index_t n, index_t hv, index_t v0) {
  for (int e = int(threadIdx.x); e < K * BV; e += int(blockDim.x)) {
    const int i = e / BV, j = e % BV;
    h[i][j] = x.data() ? x(n, hv, i, v0 + j) : 0.0f;
  }
}

/// x(n, hv, i, v0 + j) = h[i][j] for the [K, BV] block (x a state view or a workspace block
/// viewed as one); the whole block copies.
template <int K, int BV, int ld>
__device__ void store_state_block(const tensor_view<float, 4>& x, const float (*h)[ld], index_t n, index_t hv, index_t v0) {
  for (int e = int(threadIdx.x); e < K * BV; e += int(blockDim.x)) {
    const int i = e / BV, j = e % BV;
    x(n, hv, i, v0 + j) = h[i][j];
  }
}

/// Lane r's log gate of the chunk (floored; 0 past its n tokens and for rules without decay).
template <class Rule, class T>
__device__ float lane_gate(const backward_args<Rule, T>& args, index_t b, index_t t0, int n, index_t hv) {
  const int r = int(threadIdx.x) % 32;
  return r < n ? log_gate<Rule, T>(args.in, b, t0 + r, hv) : 0.0f;
}

/// A lane's coefficient of the chunk loaded ahead of its use: `raw` as load_ahead gives it (a
/// 16-bit input's coefficient as its stored bits, coefficient_view.hpp), converted by value()
/// where the kernel uses it. Converted where it was loaded, a kernel waits for the load there:
/// the state passes did on every chunk (a quarter of their stall samples at B1·T8192·H16),
/// pass 4 and pass 1 on beta's load after their first barrier (bench/cuda/NOTES.md).
template <class E>
struct lane_ahead {
  E raw{};  // the default reads as 0 (past the chunk's tokens)
  __device__ float value() const { return float(value_of(raw)); }
};

/// Rules whose log gate is their input g as stored (they say so: `log_gate_is_g`), which
/// lane_gate_ahead loads by its bits.
template <class Rule>
inline constexpr bool gate_is_input_g = requires { requires Rule::log_gate_is_g; };

/// A log gate loaded ahead: floored where it is used, as lane_gate gives it.
template <class E>
struct gate_ahead : lane_ahead<E> {
  __device__ float value() const { return floored_log_gate(lane_ahead<E>::value()); }
};

/// Lane r's log gate of the chunk (0 past its n tokens), loaded for use later: the stored
/// element for the rules that read g as it is, else lane_gate's value (already floored).
template <class Rule, class T>
__device__ auto lane_gate_ahead(const backward_args<Rule, T>& args, index_t b, index_t t0, int n, index_t hv) {
  if constexpr (gate_is_input_g<Rule>) {
    const int r = int(threadIdx.x) % 32;
    using E = decltype(load_ahead(args.in.g, b, t0, hv));
    return gate_ahead<E>{{r < n ? load_ahead(args.in.g, b, t0 + r, hv) : E{}}};
  } else {
    return gate_ahead<float>{{lane_gate(args, b, t0, n, hv)}};
  }
}

/// Lane r's beta of the chunk (0 past its n tokens) loaded for chunk_betas, for the rules whose
/// beta is an input; the others' beta depends on the key's norm, which chunk_betas computes
/// first (then nothing is loaded ahead).
template <class Rule, class T>
__device__ auto lane_beta_ahead(const backward_args<Rule, T>& args, index_t b, index_t t0, int n, index_t hv) {
  if constexpr (beta_is_input<Rule>) {
    const int r = int(threadIdx.x) % 32;
    using E = decltype(load_ahead(args.in.beta, b, t0, hv));
    return lane_ahead<E>{r < n ? load_ahead(args.in.beta, b, t0 + r, hv) : E{}};
  } else {
    return lane_ahead<float>{};
  }
}

/// Lane r's beta as pass 1 wrote it (delta family), 0 past the chunk's n tokens.
template <class Rule, class T>
__device__ float lane_beta(const backward_args<Rule, T>& args, index_t b, index_t t0, int n, index_t hv) {
  const int r = int(threadIdx.x) % 32;
  return r < n ? args.betas(b, t0 + r, hv) : 0.0f;
}

/// Issues the copies of a chunk's corrected values U and value gradients dY (delta family;
/// [n, V] as passes 2 and 3 wrote them, in workspace_hand_over_t) into the tiles u and dy [C,
/// ld] of that type, committed as one group: pass 4's hand-over, read after wait_copies.
template <int C, int V, int Threads, class E, class Rule, class T>
__device__ void issue_hand_over(E* u, E* dy, int ld, const backward_args<Rule, T>& args, index_t b, index_t t0, int n,
                                index_t hv) {
  static_assert(std::is_same_v<E, typename backward_args<Rule, T>::hand_over_type>, "tiles of the hand-over's type");
  load_rows<C, V, Threads>(u, ld, tensor_view<const E, 4>(args.u_rows), b, t0, n, hv);
  load_rows<C, V, Threads>(dy, ld, tensor_view<const E, 4>(args.dy_rows), b, t0, n, hv);
  commit_copies();
}

/// Lane r's inclusive cumsum of the chunk's log gates (one token per lane) and its last value.
__device__ inline float gate_cumsum(float gate, int lane, float& last) {
  static_assert(backward_chunk == 32, "one token per lane");
  const float run = warp_prefix_sum(gate, lane);
  last = __shfl_sync(0xffffffffu, run, 31);
  return run;
}

/// b, Gam and e of the chunk from lane r's log gate g (warp 0: a warp scan). The caller
/// synchronises before reading them.
__device__ inline void chunk_decays(float g, chunk_coefficients& cf) {
  if (threadIdx.x >= 32) return;
  const int r = int(threadIdx.x);
  float last;
  const float run = gate_cumsum(g, r, last);
  cf.b[r] = run;
  cf.gam[r] = expf(run);
  cf.e[r] = expf(fminf(last - run, 0.0f));
}

/// The same, reading the gates (warp 0).
template <class Rule, class T>
__device__ void chunk_decays(const backward_args<Rule, T>& args, chunk_coefficients& cf, index_t b, index_t t0, int n,
                             index_t hv) {
  if (threadIdx.x < 32) chunk_decays(lane_gate(args, b, t0, n, hv), cf);
}

/// D_ri = exp(b_r - b_i), clamped to exponents <= 0 as on the CPU.
__device__ inline float decay_between(const chunk_coefficients& cf, int r, int i) {
  return expf(fminf(cf.b[r] - cf.b[i], 0.0f));
}

/// ||k_r||^2 and beta_r of the chunk's rows from its key tile: warp w takes rows w, w + warps,
/// ... (a warp sum each), lane i keeping the norm of its i-th row. The rules whose beta is an
/// input take it from `ahead` (lane_beta_ahead, loaded with the chunk's rows: lane r holds
/// token r's); the others' lanes then read their rows' betas at once, so that those loads wait
/// one memory latency, not one per row. The caller synchronises.
template <int K, class Rule, class T, class E, class B>
__device__ void chunk_betas(const backward_args<Rule, T>& args, chunk_coefficients& cf, const E* keys, int ldk,
                            index_t b, index_t t0, int n, index_t hv, const lane_ahead<B>& ahead) {
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32, warps = int(blockDim.x) / 32;
  float mine = 0.0f;  // ||k||^2 of the warp's row `lane`
  int rows = 0;
  for (int r = warp; r < backward_chunk; r += warps, ++rows) {
    float kk = 0.0f;
    for (int i = lane; i < K; i += 32) {
      const float x = to_float(keys[r * ldk + i]);
      kk += x * x;
    }
    kk = warp_sum(kk);
    if (lane == rows) mine = kk;
  }
  const int r = warp + lane * warps;  // the lane's row, where lane < rows
  float beta = 0.0f;
  if constexpr (beta_is_input<Rule>) beta = __shfl_sync(0xffffffffu, ahead.value(), r % 32);
  if (lane < rows) {
    cf.sq[r] = mine;
    if constexpr (beta_is_input<Rule>) cf.beta[r] = beta;
    else cf.beta[r] = r < n ? write_strength<Rule, T>(args.in, b, t0 + r, hv, mine) : 0.0f;
  }
}

/// The epilogue of P = Q K^T ⊙ D: p [C, C] (ld chunk_corrections::ld) on and below the
/// diagonal, 0 above; the product times `qscale` (where the queries were not scaled) first.
__device__ inline auto scores_epilogue(const chunk_coefficients& cf, float* p, float qscale = 1.0f) {
  return [&cf, p, qscale]<int W>(int r, int j, const float (&x)[W]) {
    constexpr int ld = chunk_corrections::ld;
#pragma unroll
    for (int e = 0; e < W; ++e)
      p[r * ld + j + e] = j + e <= r ? (qscale * x[e]) * decay_between(cf, r, j + e) : 0.0f;
  };
}

/// The epilogue of G = stril(K K^T ⊙ D): g [C, C] (ld chunk_corrections::ld), 0 on and above
/// the diagonal.
__device__ inline auto gram_epilogue(const chunk_coefficients& cf, float* g) {
  return [&cf, g]<int W>(int r, int j, const float (&x)[W]) {
    constexpr int ld = chunk_corrections::ld;
#pragma unroll
    for (int e = 0; e < W; ++e) g[r * ld + j + e] = j + e < r ? x[e] * decay_between(cf, r, j + e) : 0.0f;
  };
}

/// The exact operands (warp_gemm.cuh) of the scores Q K^T (the keys as loaded) and of K K^T.
inline constexpr exact_operands scores_exact = exact_operands::b, gram_exact = exact_operands::both;

/// p = Q K^T ⊙ D on and below the diagonal, 0 above ([C, C], ld chunk_corrections::ld). The
/// queries and keys may be tiles of the policy's 16-bit type holding them as loaded (mma_16bit
/// only; each with its row stride), which its products read with ldmatrix; the scores are then
/// taken times `qscale`, the scale the queries were not given.
template <class P, int K, class EQ, class EK>
__device__ void chunk_scores(const EQ* queries, int ldq, const EK* keys, int ldk, const chunk_coefficients& cf,
                             float* p, float* stage, float qscale = 1.0f) {
  constexpr int C = backward_chunk;
  tile_product_split_k<P, row_major, col_major, C, C, K, scores_exact>(queries, ldq, keys, ldk, stage,
                                                                       scores_epilogue(cf, p, qscale));
}

/// M = (I + diag(beta) G)^{-1} of the chunk from its G (g, [C, C], ld chunk_corrections::ld)
/// and betas, visible to the block, by forward substitution: lane c of warp 0 solves column c,
/// then hands it to `columns(c, col)` (col[r] = M_rc), which writes what the caller keeps of it.
/// Ends synchronised.
template <class Columns>
__device__ void chunk_solve_columns(const chunk_coefficients& cf, const float* g, Columns&& columns) {
  constexpr int C = backward_chunk, ld = chunk_corrections::ld;
  if (threadIdx.x < 32) {
    const int c = int(threadIdx.x);
    float col[C];
#pragma unroll
    for (int r = 0; r < C; ++r) {
      // sum_j G_rj col_j in four interleaved partial sums (four independent chains of
      // dependent FMAs instead of one), added in a fixed tree
      float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < r; ++j) part[j % 4] += g[r * ld + j] * col[j];
      col[r] = (r == c ? 1.0f : 0.0f) - cf.beta[r] * ((part[0] + part[1]) + (part[2] + part[3]));
    }
    columns(c, col);
  }
  __syncthreads();
}

/// M and T = M diag(beta) of the chunk (chunk_corrections) from its G and betas
/// (chunk_solve_columns).
__device__ inline void chunk_solve(const chunk_coefficients& cf, chunk_corrections& cr) {
  chunk_solve_columns(cf, cr.g[0], [&](int c, const float (&col)[backward_chunk]) {
#pragma unroll
    for (int r = 0; r < backward_chunk; ++r) {
      cr.m[r][c] = col[r];
      cr.t[r][c] = col[r] * cf.beta[c];
    }
  });
}

/// P (chunk_scores) and G = stril(K K^T ⊙ D) (g, [C, C], ld chunk_corrections::ld) from the
/// same tiles, b visible to the block. With mma_16bit products the two [C, C] products (8 units of 16 x 8
/// each, a unit over the whole Kd) run side by side on the two halves of the block's warps,
/// with one barrier after both; each unit's bits are as when the products run one after the
/// other, which the WMMA policies do. Ends synchronised; chunk_solve then gives M and T.
/// The queries and keys as for chunk_scores.
template <class P, int K, class EQ, class EK>
__device__ void chunk_scores_gram(const EQ* queries, int ldq, const EK* keys, int ldk, const chunk_coefficients& cf,
                                  float* p, float* g, float* stage, float qscale = 1.0f) {
  constexpr int C = backward_chunk;
  if constexpr (is_mma_16bit<P>) {
    using T = typename P::type;
    const int half = int(blockDim.x) / 64;
    warp_gemm<T, P::terms, row_major, col_major, C, C, K, false, scores_exact>(queries, ldq, keys, ldk,
                                                                               scores_epilogue(cf, p, qscale), 0, half);
    warp_gemm<T, P::terms, row_major, col_major, C, C, K, false, gram_exact>(keys, ldk, keys, ldk,
                                                                             gram_epilogue(cf, g), half, half);
  } else {
    chunk_scores<P, K>(queries, ldq, keys, ldk, cf, p, stage, qscale);
    __syncthreads();
    tile_product_split_k<P, row_major, col_major, C, C, K, gram_exact>(keys, ldk, keys, ldk, stage,
                                                                       gram_epilogue(cf, g));
  }
  __syncthreads();
}

}  // namespace linattn::cuda::detail
