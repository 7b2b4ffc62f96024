// SPDX-License-Identifier: MIT
/// \file
/// Chunkwise form, pass 2 for 16-bit inputs (__half, __nv_bfloat16): the same recurrence as
/// chunk_state_wmma.cuh, with the state held transposed in fp32 accumulator registers for the
/// whole sequence. A block has `Groups` groups of `Split` warps; group j owns 16 value columns,
/// Ht = H^T [16, K], and warp s of the group its key columns [s K/Split, (s+1) K/Split). Per
/// chunk, with the chunk's tiles shared by the block in shared memory:
///
///   U~t = U^T - Ht W^T                    [16, C]   (additive family: U~t = V^T)
///   Ot  = scale Ht Q^T diag(exp b) + U~t scores^T
///   Ht <- exp(b_C) Ht + U~t diag(exp(b_C - b)) K
///
/// Ht, U~t and Ot stay in registers (an accumulator tile repacks into an A operand in place).
/// With Split > 1 the warps of a group add their partial Ht W^T and Ht Q^T through shared
/// memory (every warp forms the whole U~t; warp s finishes tokens [s C/Split, (s+1) C/Split)
/// of Ot), which divides the sequential work per chunk by Split for calls with few sequences x
/// heads. Ht enters its products rounded to the input type, as U~ does.
///
/// The additive rules need no chunk-local pass here (Hebbian; ScalarDecay on the one-warp groups,
/// `forms_own_scores`): the block forms each chunk's scores from the Q and K tiles it holds and
/// b (chunk_scores.cuh; b from chunk_gate_cumsum.cuh), so Q and K are read once and no [T, C]
/// tile goes through memory.
#pragma once

#include <type_traits>

#include "../tile/async_copy.cuh"
#include "../tile/load_store.cuh"
#include "../tile/mma_sync.cuh"
#include "chunk_args.cuh"
#include "chunk_scores.cuh"
#include "rule_coefficients.cuh"
#include "state_pass_decays.cuh"

namespace linattn::cuda::detail {

/// Whether the register-resident state pass with `Split` warps per group forms the chunk's
/// scores itself (no chunk-local pass): the additive rule without a decay (b = 0) on both
/// widths; with a scalar decay (b from the gate-cumsum pass) on the one-warp groups only, since
/// beside the 2-warp groups (at most 4 groups per multiprocessor) the chunk-local pass was the
/// faster (bench/cuda/NOTES.md).
template <class Rule, int Split>
inline constexpr bool forms_own_scores =
    !corrects<Rule> && (Rule::decay == decay_kind::none || (Rule::decay == decay_kind::scalar && Split == 1));

/// One chunk's tiles in shared memory (two buffers), delta family; `Slots` decays
/// (state_pass_decays.cuh).
template <class T, int K, int BV, bool Corrects, int Slots>
struct alignas(128) chunk_state_mma_tiles {
  static constexpr int ldk = K + 8, ldv = BV + 8, lds = chunk + 8;  // 16-byte rows
  T w[chunk][ldk];                 // [C, K]
  T queries[chunk][ldk];           // [C, K]
  T keys[chunk][ldk];              // [C, K]
  T values[chunk][ldv];            // [C, BV]  U
  T scores[chunk][lds];            // [C, C]
  alignas(16) float gates[Slots];  // [Slots]  b or the key rows' decays (16-byte copies)
};

/// The additive family's: no W.
template <class T, int K, int BV, int Slots>
struct alignas(128) chunk_state_mma_tiles<T, K, BV, false, Slots> {
  static constexpr int ldk = K + 8, ldv = BV + 8, lds = chunk + 8;
  T queries[chunk][ldk];           // [C, K]
  T keys[chunk][ldk];              // [C, K]
  T values[chunk][ldv];            // [C, BV]  V
  T scores[chunk][lds];            // [C, C]
  alignas(16) float gates[Slots];  // [Slots]  b or the key rows' decays
};

/// Shared memory of the register-resident state pass (Split = 1: no partial products).
template <class Rule, class T, int K, int Groups, int Split>
struct chunk_state_mma_buffers {
  using tiles = chunk_state_mma_tiles<T, K, 16 * Groups, corrects<Rule>, state_pass_decays<Rule, K>::slots>;
  static constexpr int BV = 16 * Groups;          // value columns per block
  static constexpr int warps = Groups * Split, threads = 32 * warps;
  static constexpr int out_rows = chunk / Split;  // output rows each warp finishes
  static constexpr int ldk = tiles::ldk, ldv = tiles::ldv, lds = tiles::lds, ldo = 16 + 8;
  tiles buffer[2];                                // [2]  chunk c in buffer c % 2
  T out[warps][out_rows][ldo];                    // [warps][C / Split, 16]  each warp's rows of Ot, staged
};

/// With Split > 1 the warps of a group add their partial Ht W^T and Ht Q^T here: per warp, x then o,
/// one float4 per n-tile and lane.
template <class Rule, class T, int K, int Groups, int Split>
struct chunk_state_mma_partials : chunk_state_mma_buffers<Rule, T, K, Groups, Split> {
  float4 partials[Groups * Split][2][chunk / 8][32];  // [warps][x, o][C / 8 n-tiles][lanes]
};

template <class Rule, class T, int K, int Groups, int Split>
using chunk_state_mma_storage = std::conditional_t<(Split > 1), chunk_state_mma_partials<Rule, T, K, Groups, Split>,
                                                   chunk_state_mma_buffers<Rule, T, K, Groups, Split>>;

/// Queues the copies of one chunk's tiles into `buf` (one commit group per thread); the scores
/// only where the pass does not form them (`OwnScores`).
template <int K, int BV, int Threads, bool OwnScores, class Rule, class T, class Tiles>
__device__ void load_chunk_tiles(Tiles& buf, const chunk_args<Rule, T>& args, int i, index_t b, int t0, int n, index_t hv,
                                 index_t h, index_t v0) {
  if constexpr (corrects<Rule>) {
    load_rows<chunk, K, Threads>(buf.w[0], Tiles::ldk, tensor_view<const T, 4>(args.w), b, t0, n, hv);
    load_rows<chunk, BV, Threads>(buf.values[0], Tiles::ldv, tensor_view<const T, 4>(args.u), b, t0, n, hv, v0);
  } else {
    load_rows<chunk, BV, Threads>(buf.values[0], Tiles::ldv, args.in.v, b, t0, n, hv, v0);
  }
  const index_t qk = args.state_head(h, hv);
  load_rows<chunk, K, Threads>(buf.queries[0], Tiles::ldk, args.state_queries(), b, t0, n, qk);
  load_rows<chunk, K, Threads>(buf.keys[0], Tiles::ldk, args.state_keys(), b, t0, n, qk);
  if constexpr (!OwnScores)
    load_rows<chunk, chunk, Threads>(buf.scores[0], Tiles::lds, tensor_view<const T, 4>(args.scores), b, t0, n, hv);
  if constexpr (Rule::decay != decay_kind::none)  // else b = 0, set once
    args.template load_gate_cumsum<int(sizeof(Tiles::gates) / sizeof(float))>(buf.gates, i, hv, int(threadIdx.x));
  commit_copies();
}

template <class Rule, class T, int K, int Groups, int Split>
__global__ void __launch_bounds__(32 * Groups * Split) chunk_state_mma_kernel(chunk_args<Rule, T> args) {
  static_assert(sizeof(T) == 2, "the register-resident state pass takes 16-bit inputs");
  static_assert(Split == 1 || Split == 2 || Split == 4, "the output tokens split evenly over the warps of a group");
  static_assert(K % (16 * Split) == 0, "each warp takes whole 16-key steps");
  using S = chunk_state_mma_storage<Rule, T, K, Groups, Split>;
  using decays = state_pass_decays<Rule, K>;
  constexpr bool own_scores = forms_own_scores<Rule, Split>;
  constexpr int KP = K / Split;        // key columns per warp
  constexpr int KT = KP / 8;           // n-tiles of the warp's part of Ht
  constexpr int CT = chunk / 8;        // n-tiles of a [16, C] tile
  constexpr int OT = CT / Split;       // n-tiles of Ot this warp finishes
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& smem = *reinterpret_cast<S*>(dynamic_smem);

  const index_t n_seq = blockIdx.z, hv = blockIdx.y, v0 = index_t(blockIdx.x) * S::BV;
  const index_t h = hv / args.group;
  const span s = args.sequence(n_seq);
  const index_t state_slot = args.slot(n_seq);  // state slot (pool); < 0: zero start, no write
  const index_t b = s.b;
  const int end = s.start + s.length;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int group = warp / Split, part = warp % Split;
  const index_t vw = v0 + 16 * group;  // the group's first value column
  const int k0 = part * KP;            // the warp's first key column
  T* stage = smem.out[0][0] + warp * S::out_rows * S::ldo;  // out[warp] (flat: see bench/cuda/NOTES.md)

  // Ht(j, k0 + i) = S(k0 + i, vw + j): lane holds rows g, g+8 and columns 8 nt + 2t, +1
  float ht[KT][4];
#pragma unroll
  for (int nt = 0; nt < KT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      ht[nt][e] = args.s0.data() && state_slot >= 0 ? args.s0(state_slot, hv, k0 + 8 * nt + 2 * t + (e & 1), vw + g + 8 * (e >> 1)) : 0.0f;

  // this warp's part of H into at(key, value column) (the final state or a checkpoint)
  const auto store_state = [&](auto&& at) {
#pragma unroll
    for (int nt = 0; nt < KT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) at(k0 + 8 * nt + 2 * t + (e & 1), vw + g + 8 * (e >> 1)) = ht[nt][e];
  };
  const auto buffer = [&](int c) -> typename S::tiles& { return smem.buffer[c % 2]; };
  if constexpr (Rule::decay == decay_kind::none)  // b = 0 in both buffers (the next __syncthreads publishes it)
    if (const int r = int(threadIdx.x); r < chunk) smem.buffer[0].gates[r] = 0.0f, smem.buffer[1].gates[r] = 0.0f;
  if (s.length > 0)
    load_chunk_tiles<K, S::BV, S::threads, own_scores>(buffer(0), args, s.first_chunk, b, s.start, min(chunk, s.length),
                                                       hv, h, v0);

  const ldm_lane bl = ldm_lane::b_tiles(lane), kl = ldm_lane::kn_tiles(lane);
  for (int c = 0, t0 = s.start; t0 < end; ++c, t0 += chunk) {
    const int n = min(chunk, end - t0);
    if (t0 + chunk < end) {
      load_chunk_tiles<K, S::BV, S::threads, own_scores>(buffer(c + 1), args, s.first_chunk + c + 1, b, t0 + chunk,
                                                         min(chunk, end - t0 - chunk), hv, h, v0);
      wait_copies<1>();
    } else {
      wait_copies<0>();
    }
    __syncthreads();  // this chunk's tiles are in
    typename S::tiles& buf = buffer(c);
    if constexpr (own_scores) {  // the scores, from the tiles just loaded
      const float* b_or_none = Rule::decay == decay_kind::scalar ? buf.gates : nullptr;
      form_chunk_scores<K, S::warps>(buf.queries[0], buf.keys[0], S::ldk, b_or_none, args.scale, buf.scores[0], S::lds);
      __syncthreads();
    }
    const T* queries = buf.queries[0] + k0;
    const T* keys = buf.keys[0] + k0;
    const T* values = buf.values[0] + 16 * group;
    const T* scores = buf.scores[0];
    const float* gates = buf.gates;

    // Ht W^T and Ht Q^T over this warp's key columns, one k-step of Ht at a time
    float x[CT][4] = {}, o[CT][4] = {};
#pragma unroll
    for (int ks = 0; ks < KP / 16; ++ks) {
      std::uint32_t a[4];
      pack_a<T>(a, ht[2 * ks], ht[2 * ks + 1]);
#pragma unroll
      for (int p = 0; p < CT / 2; ++p) {
        mma_pair_ldm<T>(o[2 * p], o[2 * p + 1], a, queries + (16 * p + bl.row) * S::ldk + 16 * ks + bl.col);
        if constexpr (corrects<Rule>)
          mma_pair_ldm<T>(x[2 * p], x[2 * p + 1], a, buf.w[0] + k0 + (16 * p + bl.row) * S::ldk + 16 * ks + bl.col);
      }
    }
    if constexpr (Split > 1) {  // add the group's partial products (same order in every warp)
      // partials of warp w: [2][CT][32 lanes] float4 (x, then o), one 16-byte access per tile
      float4* mine = smem.partials[0][0][0] + warp * 2 * CT * 32;
#pragma unroll
      for (int nt = 0; nt < CT; ++nt) {
        if constexpr (corrects<Rule>) mine[nt * 32 + lane] = as_float4(x[nt]);
        mine[(CT + nt) * 32 + lane] = as_float4(o[nt]);
      }
      __syncthreads();
      const float4* first = smem.partials[0][0][0] + group * Split * 2 * CT * 32;
#pragma unroll
      for (int nt = 0; nt < CT; ++nt) {
        if constexpr (corrects<Rule>) sum_partial_tiles<Split>(x[nt], first + nt * 32 + lane, 2 * CT * 32);
        if (nt / OT == part) sum_partial_tiles<Split>(o[nt], first + (CT + nt) * 32 + lane, 2 * CT * 32);
      }
    }
    // U~t = U^T - Ht W^T (U^T read transposed straight into the accumulator layout)
#pragma unroll
    for (int p = 0; p < CT / 2; ++p) {
      std::uint32_t u[4];
      ldmatrix_x4<true>(u, values + (16 * p + bl.row) * S::ldv + bl.col);
      const float2 u0 = unpack2<T>(u[0]), u1 = unpack2<T>(u[1]), u2 = unpack2<T>(u[2]), u3 = unpack2<T>(u[3]);
      x[2 * p][0] = u0.x - x[2 * p][0], x[2 * p][1] = u0.y - x[2 * p][1];
      x[2 * p][2] = u1.x - x[2 * p][2], x[2 * p][3] = u1.y - x[2 * p][3];
      x[2 * p + 1][0] = u2.x - x[2 * p + 1][0], x[2 * p + 1][1] = u2.y - x[2 * p + 1][1];
      x[2 * p + 1][2] = u3.x - x[2 * p + 1][2], x[2 * p + 1][3] = u3.y - x[2 * p + 1][3];
    }
    // Ot = scale Ht Q^T diag(exp b) + U~t scores^T on this warp's tokens (scores lower
    // triangular: k-steps q <= p)
    const float scale = args.scale;
#pragma unroll
    for (int nt = 0; nt < CT; ++nt) {
      if (nt / OT != part) continue;
      const float f0 = scale * decays::read(gates, 8 * nt + 2 * t), f1 = scale * decays::read(gates, 8 * nt + 2 * t + 1);
      o[nt][0] *= f0, o[nt][1] *= f1, o[nt][2] *= f0, o[nt][3] *= f1;
    }
#pragma unroll
    for (int q = 0; q < CT / 2; ++q) {
      std::uint32_t a[4];
      pack_a<T>(a, x[2 * q], x[2 * q + 1]);
#pragma unroll
      for (int p = q; p < CT / 2; ++p) {
        if ((2 * p) / OT != part) continue;
        mma_pair_ldm<T>(o[2 * p], o[2 * p + 1], a, scores + (16 * p + bl.row) * S::lds + 16 * q + bl.col);
      }
    }
    // this warp's rows of Ot -> its stage [C/Split, 16] -> 16-byte stores of the valid rows
#pragma unroll
    for (int nt = 0; nt < CT; ++nt) {
      if (nt / OT != part) continue;
      const int r = 8 * nt + 2 * t - part * S::out_rows;
      stage[r * S::ldo + g] = from_float<T>(o[nt][0]);
      stage[(r + 1) * S::ldo + g] = from_float<T>(o[nt][1]);
      stage[r * S::ldo + g + 8] = from_float<T>(o[nt][2]);
      stage[(r + 1) * S::ldo + g + 8] = from_float<T>(o[nt][3]);
    }
    __syncwarp();
#pragma unroll
    for (int m = 0; m < S::out_rows * 2 / 32; ++m) {
      const int piece = lane + 32 * m, r = piece / 2, j = (piece % 2) * 8;
      if (part * S::out_rows + r < n) {
        float y[8];
        load8(stage + r * S::ldo + j, y);
        store8(args.out, b, t0 + part * S::out_rows + r, hv, vw + j, y);
      }
    }
    // Ht <- exp(b_C) Ht + U~t diag(exp(b_C - b)) K on this warp's key columns
    for_tile_elements<KP>(lane, [&](int nt, int e, int i, int) { ht[nt][e] *= decays::of_key(gates, k0 + i); });
#pragma unroll
    for (int q = 0; q < CT / 2; ++q) {
      const int c0 = 16 * q + 2 * t;
      const float f[4] = {decays::to_end(gates, c0), decays::to_end(gates, c0 + 1), decays::to_end(gates, c0 + 8),
                          decays::to_end(gates, c0 + 9)};
      std::uint32_t a[4];
      pack_a<T>(a, x[2 * q], x[2 * q + 1], f);
#pragma unroll
      for (int p = 0; p < KT / 2; ++p)
        mma_pair_ldm<T, true>(ht[2 * p], ht[2 * p + 1], a, keys + (16 * q + kl.row) * S::ldk + 16 * p + kl.col);
    }
    if (const int entry = args.checkpoint_entry(t0 + n - s.start, s.length); entry >= 0)
      store_state([&](index_t k, index_t v) -> float& { return args.checkpoints(n_seq, entry, hv, k, v); });
    __syncthreads();  // every warp is done with this buffer and the partials; both may be refilled
  }
  if (args.s1.data() && state_slot >= 0) store_state([&](index_t k, index_t v) -> float& { return args.s1(state_slot, hv, k, v); });
}

}  // namespace linattn::cuda::detail
