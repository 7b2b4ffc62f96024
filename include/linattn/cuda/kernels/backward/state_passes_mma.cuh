// SPDX-License-Identifier: MIT
/// \file
/// Backward passes 2 and 3 for bf16 inputs, with the state in registers: the recurrences of
/// chunk_states.cuh and chunk_state_grads.cuh as warp-level
/// mma.sync m16n8k16 products, in the layout of the forward's register-resident state pass
/// (chunk_state_mma.cuh). A block has `Groups` groups of `Split` warps; group j owns 16 value
/// columns, and warp s of it keeps the key columns [s K/Split, (s+1) K/Split) of Ht = H^T
/// [16, K] (pass 2) or dHt = dH^T [16, K] (pass 3) in fp32 accumulator registers for the whole
/// sequence. With Split > 1 (calls with few sequences x heads) the warps of a group add their
/// partial products with W or Wb through shared memory, which divides the sequential work per
/// chunk by Split. The block shares each chunk's rows in shared memory (two buffers: the next
/// chunk's copies are in flight while the current one is computed; one barrier per chunk, two
/// with Split > 1). Per chunk, Gam = exp(b), e = exp(b_{n-1} - b) of the chunk's gates:
///
///   pass 2 (forward order)   states[c] = Ht
///                            U~t = U^T - Ht W^T                      [16, C]  (additive: V^T)
///                            Ht <- Gam_{n-1} Ht + U~t diag(e) K      [16, K]
///   pass 3 (reverse order)   state_grads[c] = dHt
///                            dYt = dYl^T + dHt Wb^T                  [16, C]  (delta family)
///                            dHt <- Gam_{n-1} dHt + dO^T diag(scale Gam) Q - dYt diag(beta Gam) K
///
/// The delta rules hand their corrected values and value gradients to pass 4: pass 2 writes U~
/// over pass 1's U and pass 3, whose pass-1 rows are Wb = M^T diag(e) K (per-key decays: M^T
/// (K ⊙ E)) and dYl = M^T P^T dO, writes dYt (its update takes dXt = dYt diag(beta), beta from
/// pass 1) over dYl (`u_rows`, `dy_rows`): with scalar or no gates as bf16 rows, each warp's 16
/// tokens of a tile through its slice of shared memory in 16-byte pieces (store_warp_columns);
/// per-key decays as fp32.
///
/// The diagonal factors scale the A operands (a lane's tokens), so every row tile is copied
/// as it is: q, k, v, dO and pass 1's rows W, Wb, U and dYl as bf16 (ldmatrix, 4-byte
/// fragment loads, or element by element for U and dYl, each added to a product in fp32;
/// per-key decays: U and dYl fp32). Every product operand is then rounded to bf16 once, as in
/// the forward's 16-bit state pass; the sums stay fp32. The states go to the workspace as
/// workspace_state_t: bf16, the rounding pass 4's products give them anyway.
///
/// Per-key decays (VectorDecay, KDA; `PerKey`) lie along the key columns, the products' other
/// side. There the B rows carry them, as chunk_decayed_rows.cuh wrote them (bf16): K ⊙ E in
/// pass 2, scale Q ⊙ Gam and -K ⊙ Gam in pass 3. The A operands keep factor 1 (dYt: beta), and the state's
/// decay Gam_{n-1} [K] scales each lane's key columns of Ht (dHt), from a row copied with the
/// chunk's rows. The states go to the workspace as fp32, which per-key pass 4 reads.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>

#include "../../tile/async_copy.cuh"
#include "../../tile/load_store.cuh"
#include "../../tile/mma_sync.cuh"
#include "../../tile/warp_rows_store.cuh"
#include "chunk_factors.cuh"

namespace linattn::cuda::detail {

/// Warps per group of 16 value columns in the register-resident state passes, by groups per
/// block: blocks of 1 or 2 groups (calls with few sequences x heads) split each group's keys
/// over 4 or 2 warps (the shapes that measured fastest on an H200: bench/cuda/README.md).
constexpr int state_pass_split(int groups) { return groups == 1 ? 4 : groups == 2 ? 2 : 1; }

/// Groups of 16 value columns per block of the register-resident state passes: the most (8,
/// 4, 2, 1; at most V / 16) with which the blocks of both passes still fill about 3/4 of the
/// multiprocessors. More groups share a chunk's key rows in shared memory; fewer give more
/// blocks when sequences x heads are few.
inline int backward_state_groups(index_t head_blocks, index_t V, index_t multiprocessors) {
  int groups = 8;
  while (groups > 1 && (16 * groups > V || 8 * head_blocks * (V / (16 * groups)) < 3 * multiprocessors)) groups /= 2;
  return groups;
}

/// Pass 2's rows of one chunk (rows past the chunk zero). Hand: the workspace's U and dYl
/// (workspace_hand_over_t).
template <class T, int K, int BV, bool Delta, bool PerKey, class Hand>
struct alignas(16) state_rows_forward {
  using value_type = std::conditional_t<Delta, Hand, T>;  // U (pass 1) or V
  static constexpr int C = backward_chunk, DC = Delta ? C : 1;
  static constexpr int ldk = K + pad<T>, ldv = BV + pad<value_type>;  // conflict-free fragment reads
  T keys[C][ldk];                   // [C, K]   k (per-key decays: K ⊙ E)
  T w[DC][ldk];                     // [C, K]   W (delta family)
  value_type values[C][ldv];        // [C, BV]  U or V
  float decay[PerKey ? K : 1];      // [K]      Gam_{n-1} (per-key decays)
};

/// Pass 3's rows of one chunk.
template <class T, int K, int BV, bool Delta, bool PerKey, class Hand>
struct alignas(16) state_rows_reverse {
  using dyl_type = Hand;
  static constexpr int C = backward_chunk, DC = Delta ? C : 1;
  static constexpr int ldk = K + pad<T>, ldo = BV + pad<T>, ldx = BV + pad<dyl_type>;
  T queries[C][ldk];                // [C, K]   q (per-key decays: scale Q ⊙ Gam)
  T keys[DC][ldk];                  // [C, K]   k (delta family; per-key decays: -K ⊙ Gam)
  T wb[DC][ldk];                    // [C, K]   Wb
  T dout[C][ldo];                   // [C, BV]  dO
  dyl_type dxl[DC][ldx];            // [C, BV]  dYl
  float decay[PerKey ? K : 1];      // [K]      Gam_{n-1} (per-key decays)
};

template <class Rule, class T, int K, int Groups, int Split>
struct state_passes_mma_storage {
  static constexpr bool Delta = corrects<Rule>, PerKey = Rule::decay == decay_kind::vector;
  static constexpr int warps = Groups * Split, threads = 32 * warps, BV = 16 * Groups;
  static constexpr int partial_warps = Split > 1 && Delta ? warps : 0;
  using hand_over_type = workspace_hand_over_t<Rule, T>;
  using forward_rows = state_rows_forward<T, K, BV, Delta, PerKey, hand_over_type>;
  using reverse_rows = state_rows_reverse<T, K, BV, Delta, PerKey, hand_over_type>;
  union {
    forward_rows forward[2];  // pass 2: chunk i of the loop in buffer i % 2
    reverse_rows reverse[2];  // pass 3
  };
  float4 partials[partial_warps > 0 ? partial_warps : 1][backward_chunk / 8][32];  // [warps][C/8 n-tiles][lanes]
  alignas(16) T outgoing[PerKey ? 1 : warps][16][24];  // each warp's 16 keys of a state, or 16 tokens of U~ or dY,
                                                        // on their way out (bf16 states and hand-over)
};

/// The warp's Ht [16, KP] (Ht(j, i) = H(k0 + i, vw + j)) into `state` (rows k0.., columns vw..
/// of the workspace's [K, V]): bf16 states through the warp's slice of shared memory in
/// 16-byte row pieces (store_warp_columns), fp32 ones (per-key decays) element by element.
template <int KP, class S, class E>
__device__ inline void store_state_rows(E* state, index_t V, const float (&ht)[KP / 8][4], S& storage, int warp, int lane) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>)
    store_warp_columns<E, KP / 8>(ht, state, V, storage.outgoing[warp][0], lane);
  else
    for_tile_elements<KP>(lane, [&](int nt, int e, int i, int j) { state[i * V + j] = from_float<E>(ht[nt][e]); });
}

/// Where a warp of the block works: sequence n_seq (its batch row b and tokens), value head
/// hv (q/k head h), the block's first value column v0; the warp's lane, its group's first
/// value column j0 in the block's tiles (vw = v0 + j0 in the views) and its first key column
/// k0 (KP = K / Split keys).
template <int K, int Groups, int Split>
struct state_pass_place {
  static constexpr int KP = K / Split, BV = 16 * Groups;
  span seq;
  index_t b, hv, h, v0, vw;
  int lane, warp, group, j0, k0;
  template <class Args>
  __device__ state_pass_place(const Args& args, index_t n_seq)
      : seq(args.template sequence<backward_chunk>(n_seq)), b(seq.b), hv(blockIdx.y), h(hv / args.group),
        v0(index_t(blockIdx.x) * BV), lane(int(threadIdx.x) % 32), warp(int(threadIdx.x) / 32), group(warp / Split),
        j0(16 * group), k0((warp % Split) * KP) {
    vw = v0 + j0;
  }
};

/// x [16, C] = the sum of the Split partial products of the warp's group (every warp of the
/// group adds them in the same order, so all hold the same bits). Synchronises the block.
template <int Split>
__device__ inline void sum_partials(float (&x)[backward_chunk / 8][4], float4 (*partials)[backward_chunk / 8][32],
                                    int warp, int group, int lane) {
  constexpr int CT = backward_chunk / 8;
#pragma unroll
  for (int nt = 0; nt < CT; ++nt) partials[warp][nt][lane] = as_float4(x[nt]);
  __syncthreads();
#pragma unroll
  for (int nt = 0; nt < CT; ++nt) sum_partial_tiles<Split>(x[nt], &partials[group * Split][nt][lane], CT * 32);
}

/// Rows t0 .. t0 + n - 1 of `to` ([B, T, HV, V] fp32), value columns vw .. vw + 15, from a
/// group's transposed tile xt [16, C] (lane (g, t) holds tokens 8 nt + 2t (+1), columns g
/// (+8), as for_tile_elements places them). After sum_partials every warp of the group holds
/// the same bits, so the Split warps share the stores: warp part p of the group stores the
/// n-tiles nt = Split m + p, picked by selects, not branches. Each store instruction writes 8
/// consecutive floats of 4 tokens (whole 32-byte sectors). A whole chunk (every chunk but a
/// sequence's last) stores without predicates from one lane address, a few adds per store:
/// indexing the view per element under `if (i < n)` had the compiler recompute the whole
/// 64-bit index behind a branch for every store (about 12 dependent instructions each), on the
/// sequential pass's critical path.
template <int Split>
__device__ inline void store_token_columns(const tensor_view<float, 4>& to, const float (&xt)[backward_chunk / 8][4],
                                           index_t b, int t0, int n, index_t hv, index_t vw, int lane, int part) {
  constexpr int CT = backward_chunk / 8;
  static_assert(CT % Split == 0, "each warp of a group stores whole n-tiles");
  const int g = lane / 4, t = lane % 4, first = 8 * part + 2 * t;  // the lane's first token
  const index_t ts = to.stride(1), cs = to.stride(3);
  float* const lane_base = &to(b, t0, hv, vw) + index_t(first) * ts + index_t(g) * cs;
  const auto value = [&](int m, int e) {
    float v = xt[Split * m][e];
#pragma unroll
    for (int p = 1; p < Split; ++p) v = part == p ? xt[Split * m + p][e] : v;
    return v;
  };
  const auto offset = [&](int m, int e) {  // token first + 8 Split m + (e & 1), column g + 8 (e >> 1)
    return index_t(8 * Split * m + (e & 1)) * ts + index_t(8 * (e >> 1)) * cs;
  };
  if (n == backward_chunk) {
#pragma unroll
    for (int m = 0; m < CT / Split; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) lane_base[offset(m, e)] = value(m, e);
  } else {
#pragma unroll
    for (int m = 0; m < CT / Split; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (first + 8 * Split * m + (e & 1) < n) lane_base[offset(m, e)] = value(m, e);
  }
}

/// The group's transposed tile xt [16, C] (as store_token_columns takes it) to rows t0 .. t0 +
/// n - 1, columns vw .. vw + 15 of `to` ([B, T, HV, V], rows contiguous and 16-byte aligned,
/// as the workspace keeps them): fp32 by store_token_columns; 16-bit through the warp's slice
/// of shared memory as 16-byte row pieces, the 16-token pieces shared among the group's Split
/// warps (part p stores the pieces p, p + Split, ...).
template <int Split, class S, class E>
__device__ inline void store_hand_over(const tensor_view<E, 4>& to, const float (&xt)[backward_chunk / 8][4], index_t b,
                                       int t0, int n, index_t hv, index_t vw, S& storage, int warp, int lane,
                                       int part) {
  if constexpr (std::is_same_v<E, float>)
    store_token_columns<Split>(to, xt, b, t0, n, hv, vw, lane, part);
  else
    store_warp_columns<E, backward_chunk / 8>(xt, &to(b, t0, hv, vw), to.stride(1), storage.outgoing[warp][0], lane, n,
                                              part, Split);
}

/// x[r] for the lane's tokens 16 q + 2t, +1, +8, +9 (x[r] held by lane r): the factors of an
/// A fragment's columns (pack_a).
__device__ inline void token_factors(float (&f)[4], float x, int q, int t) {
  const int r = 16 * q + 2 * t;
  f[0] = __shfl_sync(0xffffffffu, x, r), f[1] = __shfl_sync(0xffffffffu, x, r + 1);
  f[2] = __shfl_sync(0xffffffffu, x, r + 8), f[3] = __shfl_sync(0xffffffffu, x, r + 9);
}

/// acc[16, C] (+)= Ht X^T over K keys: A = the registers of Ht [16, K] (rounded to T), B =
/// K columns of a row-major 16-bit tile X [C, ·] of the chunk from `x` (16-byte aligned rows),
/// two n-tiles per ldmatrix.
template <class T, int K>
__device__ inline void state_times_rows(float (&acc)[backward_chunk / 8][4], const float (&ht)[K / 8][4], const T* x,
                                        int ld, int lane) {
  const ldm_lane bl = ldm_lane::b_tiles(lane);
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
    std::uint32_t a[4];
    pack_a<T>(a, ht[2 * ks], ht[2 * ks + 1]);
#pragma unroll
    for (int nt = 0; nt < backward_chunk / 8; nt += 2)
      mma_pair_ldm<T>(acc[nt], acc[nt + 1], a, x + (8 * nt + bl.row) * ld + 16 * ks + bl.col);
  }
}

/// ht[16, K] += A (tokens 16 q .. 16 q + 15) times rows [16 q, 16 q + 16), K columns from
/// `rows`, of a bf16 tile [C, ·].
template <class T, int K>
__device__ inline void add_times_rows(float (&ht)[K / 8][4], const std::uint32_t (&a)[4], const T* rows, int ld, int q,
                                      ldm_lane kl) {
#pragma unroll
  for (int p = 0; p < K / 16; ++p)
    mma_pair_ldm<T, true>(ht[2 * p], ht[2 * p + 1], a, rows + (16 * q + kl.row) * ld + 16 * p + kl.col);
}

/// h[16, KP] <- Gam_{n-1} h: the chunk's scalar decay exp(last), or per-key decays, each of
/// the lane's key columns i times decay[i] (the warp's KP columns of Gam_{n-1}).
template <bool PerKey, int KP>
__device__ inline void decay_state(float (&h)[KP / 8][4], const float* decay, float last, int lane) {
  if constexpr (PerKey) {
    for_tile_elements<KP>(lane, [&](int nt, int e, int i, int) { h[nt][e] *= decay[i]; });
  } else {
    const float d = expf(last);
    for_tile_elements<KP>(lane, [&](int nt, int e, int, int) { h[nt][e] *= d; });
  }
}

/// Pass 2 for sequence n_seq, value head blockIdx.y, value columns blockIdx.x * 16 Groups.
template <class Rule, class T, int K, int V, int Groups, int Split>
__device__ void states_mma_pass(const backward_args<Rule, T>& args, index_t n_seq, unsigned char* smem) {
  constexpr bool delta = corrects<Rule>, per_key = Rule::decay == decay_kind::vector;
  using S = state_passes_mma_storage<Rule, T, K, Groups, Split>;
  using state_type = typename backward_args<Rule, T>::state_type;
  using R = typename S::forward_rows;
  constexpr int C = backward_chunk, CT = C / 8, KP = K / Split, BV = S::BV, Th = S::threads;
  S& storage = *reinterpret_cast<S*>(smem);
  const auto [seq, b, hv, h, v0, vw, lane, warp, group, j0, k0] = state_pass_place<K, Groups, Split>(args, n_seq);
  const int g = lane / 4, t = lane % 4;

  float ht[KP / 8][4];  // Ht(j, i) = H(k0 + i, vw + j)
  for_tile_elements<KP>(lane, [&](int nt, int e, int i, int j) {
    ht[nt][e] = args.s0.data() ? args.s0(n_seq, hv, k0 + i, vw + j) : 0.0f;
  });
  const auto values = workspace_or_input<delta>(args.u_rows, args.in.v);
  const auto keys = workspace_or_input<per_key>(args.keys_end, args.in.k);  // per-key decays: K ⊙ E
  const tensor_view<const T, 4> w(args.w_fwd);
  const auto decays = args.chunk_decay_rows(K);  // per-key decays
  const row_source<C, K, Th, T> key_rows(keys, b, per_key ? hv : h), w_rows(w, b, hv);
  const row_source<C, BV, Th, typename R::value_type> value_rows(values, b, hv, v0);
  const row_source<1, K, Th, float> decay_rows(decays, 0, hv);
  const int end = seq.start + seq.length, chunks = (seq.length + C - 1) / C;
  const auto issue = [&](R& buf, int c) {
    const int t0 = seq.start + c * C, n = min(C, end - t0);
    key_rows.issue(buf.keys[0], R::ldk, keys, t0, n);
    if constexpr (delta) w_rows.issue(buf.w[0], R::ldk, w, t0, n);
    value_rows.issue(buf.values[0], R::ldv, values, t0, n);
    if constexpr (per_key) decay_rows.issue(buf.decay, K, decays, seq.first_chunk + c, 1);
    commit_copies();
    if constexpr (per_key) return gate_ahead<float>{};
    else return lane_gate_ahead(args, b, t0, n, hv);
  };
  using gate_raw = decltype(issue(storage.forward[0], 0));
  gate_raw gate_next = chunks > 0 ? issue(storage.forward[0], 0) : gate_raw{};
  const ldm_lane kl = ldm_lane::kn_tiles(lane);
  for (int c = 0; c < chunks; ++c) {
    wait_copies<0>();
    __syncthreads();  // chunk c's rows are in; every warp is done with chunk c - 1's buffer
    const float gate = gate_next.value();
    if (c + 1 < chunks) gate_next = issue(storage.forward[(c + 1) % 2], c + 1);
    const R& buf = storage.forward[c % 2];
    state_type* state = args.state_at(args.states, seq.first_chunk + c, hv, K, V) + index_t(k0) * V + vw;  // [K, V]
    store_state_rows<KP>(state, V, ht, storage, warp, lane);
    float last = 0.0f, to_end = 1.0f;  // e of the lane's token (scalar gates)
    if constexpr (!per_key) {
      const float run = gate_cumsum(gate, lane, last);
      to_end = expf(fminf(last - run, 0.0f));
    }

    float x[CT][4] = {};  // U~t [16, C]
    if constexpr (delta) {
      state_times_rows<T, KP>(x, ht, buf.w[0] + k0, R::ldk, lane);
      if constexpr (Split > 1) sum_partials<Split>(x, storage.partials, warp, group, lane);
    }
#pragma unroll
    for (int nt = 0; nt < CT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        x[nt][e] = to_float(buf.values[8 * nt + 2 * t + (e & 1)][j0 + g + 8 * (e >> 1)]) - x[nt][e];
    decay_state<per_key, KP>(ht, buf.decay + k0, last, lane);
#pragma unroll
    for (int q = 0; q < CT / 2; ++q) {
      float f[4] = {1.0f, 1.0f, 1.0f, 1.0f};
      if constexpr (!per_key) token_factors(f, to_end, q, t);
      std::uint32_t a[4];
      pack_a<T>(a, x[2 * q], x[2 * q + 1], f);
      add_times_rows<T, KP>(ht, a, buf.keys[0] + k0, R::ldk, q, kl);
    }
    if constexpr (delta) {  // U~ for pass 4, after the update's products (off the chain of states)
      const int t0 = seq.start + c * C;
      store_hand_over<Split>(args.u_rows, x, b, t0, min(C, end - t0), hv, vw, storage, warp, lane, warp % Split);
    }
  }
}

/// Pass 3 for sequence n_seq (its chunks in reverse), value head blockIdx.y, value columns
/// blockIdx.x * 16 Groups; dL/d(initial state) at the end.
template <class Rule, class T, int K, int V, int Groups, int Split>
__device__ void state_grads_mma_pass(const backward_args<Rule, T>& args, index_t n_seq, unsigned char* smem) {
  constexpr bool delta = corrects<Rule>, per_key = Rule::decay == decay_kind::vector;
  using S = state_passes_mma_storage<Rule, T, K, Groups, Split>;
  using state_type = typename backward_args<Rule, T>::state_type;
  using R = typename S::reverse_rows;
  constexpr int C = backward_chunk, CT = C / 8, KP = K / Split, BV = S::BV, Th = S::threads;
  S& storage = *reinterpret_cast<S*>(smem);
  const auto [seq, b, hv, h, v0, vw, lane, warp, group, j0, k0] = state_pass_place<K, Groups, Split>(args, n_seq);
  const int g = lane / 4, t = lane % 4;
  const float scale = args.scale;

  float dh[KP / 8][4];  // dHt(j, i) = dH(k0 + i, vw + j)
  for_tile_elements<KP>(lane, [&](int nt, int e, int i, int j) {
    dh[nt][e] = args.ds1.data() ? args.ds1(n_seq, hv, k0 + i, vw + j) : 0.0f;
  });
  // per-key decays: scale Q ⊙ Gam and -K ⊙ Gam of value head hv
  const auto queries = workspace_or_input<per_key>(args.queries_start, args.in.q);
  const auto keys = workspace_or_input<per_key>(args.keys_start, args.in.k);
  const index_t key_head = per_key ? hv : h;
  const tensor_view<const T, 4> wb(args.w_bwd);
  using dyl_type = typename R::dyl_type;
  const tensor_view<const dyl_type, 4> dyl(args.dy_rows);
  const auto decays = args.chunk_decay_rows(K);  // per-key decays
  const row_source<C, K, Th, T> query_rows(queries, b, key_head), key_rows(keys, b, key_head), wb_rows(wb, b, hv);
  const row_source<C, BV, Th, T> dout_rows(args.dout, b, hv, v0);
  const row_source<C, BV, Th, dyl_type> dyl_rows(dyl, b, hv, v0);
  const row_source<1, K, Th, float> decay_rows(decays, 0, hv);
  float beta_next = 0.0f;  // beta of the lane's token (delta family)
  const auto issue = [&](R& buf, int c) {
    const int t0 = seq.start + c * C, n = min(C, seq.start + seq.length - t0);
    if constexpr (delta) beta_next = lane_beta(args, b, t0, n, hv);
    query_rows.issue(buf.queries[0], R::ldk, queries, t0, n);
    dout_rows.issue(buf.dout[0], R::ldo, args.dout, t0, n);
    if constexpr (delta) {
      key_rows.issue(buf.keys[0], R::ldk, keys, t0, n);
      wb_rows.issue(buf.wb[0], R::ldk, wb, t0, n);
      dyl_rows.issue(buf.dxl[0], R::ldx, dyl, t0, n);
    }
    if constexpr (per_key) decay_rows.issue(buf.decay, K, decays, seq.first_chunk + c, 1);
    commit_copies();
    if constexpr (per_key) return gate_ahead<float>{};
    else return lane_gate_ahead(args, b, t0, n, hv);
  };
  const int chunks = (seq.length + C - 1) / C;
  using gate_raw = decltype(issue(storage.reverse[0], 0));
  gate_raw gate_next = chunks > 0 ? issue(storage.reverse[0], chunks - 1) : gate_raw{};
  const ldm_lane bl = ldm_lane::b_tiles(lane), kl = ldm_lane::kn_tiles(lane);
  for (int step = 0; step < chunks; ++step) {
    const int c = chunks - 1 - step;
    wait_copies<0>();
    __syncthreads();  // chunk c's rows are in; every warp is done with the previous buffer
    const float gate = gate_next.value(), beta = beta_next;
    if (c > 0) gate_next = issue(storage.reverse[(step + 1) % 2], c - 1);
    const R& buf = storage.reverse[step % 2];
    state_type* grad = args.state_at(args.state_grads, seq.first_chunk + c, hv, K, V) + index_t(k0) * V + vw;  // [K, V]
    store_state_rows<KP>(grad, V, dh, storage, warp, lane);
    float last = 0.0f, gam = 1.0f;  // Gam of the lane's token (scalar gates)
    if constexpr (!per_key) gam = expf(gate_cumsum(gate, lane, last));

    float x[CT][4] = {};  // dYt [16, C]
    if constexpr (delta) {
      state_times_rows<T, KP>(x, dh, buf.wb[0] + k0, R::ldk, lane);
      if constexpr (Split > 1) sum_partials<Split>(x, storage.partials, warp, group, lane);
#pragma unroll
      for (int nt = 0; nt < CT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) x[nt][e] += to_float(buf.dxl[8 * nt + 2 * t + (e & 1)][j0 + g + 8 * (e >> 1)]);
    }
    decay_state<per_key, KP>(dh, buf.decay + k0, last, lane);
#pragma unroll
    for (int q = 0; q < CT / 2; ++q) {
      float f[4] = {1.0f, 1.0f, 1.0f, 1.0f};
      if constexpr (!per_key) token_factors(f, gam, q, t);
      std::uint32_t a[4];  // dO^T diag(scale Gam), tokens 16 q .. (per-key decays: dO^T, the B rows carry them)
      ldmatrix_x4<true>(a, buf.dout[0] + (16 * q + bl.row) * R::ldo + j0 + bl.col);
      if constexpr (!per_key) scale_a<T>(a, {scale * f[0], scale * f[1], scale * f[2], scale * f[3]});
      add_times_rows<T, KP>(dh, a, buf.queries[0] + k0, R::ldk, q, kl);
      if constexpr (delta) {  // -dXt diag(Gam) = -dYt diag(beta Gam) (per-key decays: dYt diag(beta),
                              // the B rows carry -Gam)
        float fb[4];
        token_factors(fb, beta, q, t);
        const float sign = per_key ? 1.0f : -1.0f;
        f[0] *= sign * fb[0], f[1] *= sign * fb[1], f[2] *= sign * fb[2], f[3] *= sign * fb[3];
        pack_a<T>(a, x[2 * q], x[2 * q + 1], f);
        add_times_rows<T, KP>(dh, a, buf.keys[0] + k0, R::ldk, q, kl);
      }
    }
    if constexpr (delta) {  // dY for pass 4, after the update's products (off the chain of state gradients)
      const int t0 = seq.start + c * C;
      store_hand_over<Split>(args.dy_rows, x, b, t0, min(C, seq.start + seq.length - t0), hv, vw, storage, warp, lane,
                             warp % Split);
    }
  }
  if (args.ds0.data())
    for_tile_elements<KP>(lane, [&](int nt, int e, int i, int j) { args.ds0(n_seq, hv, k0 + i, vw + j) = dh[nt][e]; });
}

template <class Rule, class T, int K, int V, int Groups, int Split>
__global__ void __launch_bounds__(32 * Groups * Split) chunk_state_passes_mma_kernel(backward_args<Rule, T> args) {
  static_assert(std::is_same_v<typename backward_args<Rule, T>::row_type, T>, "the workspace holds the rows as bf16");
  static_assert(V % (16 * Groups) == 0, "whole blocks of value columns");
  static_assert(K % (16 * Split) == 0, "each warp takes whole 16-key steps");
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  const unsigned sequences = gridDim.z / 2;
  if (blockIdx.z < sequences) states_mma_pass<Rule, T, K, V, Groups, Split>(args, blockIdx.z, dynamic_smem);
  else state_grads_mma_pass<Rule, T, K, V, Groups, Split>(args, blockIdx.z - sequences, dynamic_smem);
}

}  // namespace linattn::cuda::detail
