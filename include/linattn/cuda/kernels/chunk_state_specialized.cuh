// SPDX-License-Identifier: MIT
/// \file
/// Chunkwise form, pass 2 for 16-bit inputs when few sequences x heads leave the
/// multiprocessors idle: the state pass with warps specialised in two roles, so that the
/// output products leave the sequential path. One block per (sequence, value head, BV value
/// columns) with 8 warps:
///
///  - state warps 0-3 carry H [K, BV] in fp32 accumulator registers, warp w owning key rows
///    [w K/4, (w+1) K/4); per chunk, with its W, K, U tiles in shared memory,
///      U~ = U - W H                          warp w: tokens [16 w, 16 w + 16)
///      H <- exp(b_C) H + K^T diag(exp(b_C - b)) U~
///    H reaches the U~ product, and U~ the update, through shared memory (rounded to T, as
///    the fused pass rounds them);
///  - output warps 4-7 form, one chunk behind, O = scale diag(exp b) Q H + scores U~ from
///    their own Q and score tiles and the H and U~ the state warps hand over.
///
/// The hand-over is a two-slot ring (H and U~ of chunks c and c + 1) with a producer and a
/// consumer barrier per slot: the state warps signal `full` of slot c % 2 once they have
/// written it (bar.arrive, no wait) and carry on; the output warps wait there, read the slot
/// and signal its `empty`, on which the state warps wait only before they write H of chunk
/// c + 2 into it. So neither role waits for the other's chunk unless it runs two chunks ahead;
/// nothing goes through global memory.
///
/// Each role queues its tiles `Stages - 1` chunks ahead into a ring of `Stages` buffers (as
/// many as fit the block's shared memory, up to 4): with few blocks the memory system is idle
/// and a chunk's work is shorter than the latency of its copies, so one chunk of look-ahead
/// left the sequential loop waiting on them.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../tile/async_copy.cuh"
#include "../tile/bulk_copy.cuh"
#include "../tile/dims.cuh"
#include "../tile/load_store.cuh"
#include "../tile/mma_sync.cuh"
#include "../tile/named_barrier.cuh"
#include "../tile/warp_rows_store.cuh"
#include "chunk_args.cuh"
#include "chunk_scores.cuh"
#include "rule_coefficients.cuh"
#include "state_pass_decays.cuh"

namespace linattn::cuda::detail {

/// The state warps' tiles of one chunk (two buffers), delta family. W, K (and the output warps'
/// Q and scores) come as one bulk copy per tile from the workspace, head-major with rows padded
/// as here (host/plan.cuh). `Slots` decays (state_pass_decays.cuh).
template <class T, int K, int BV, bool Corrects, int Slots>
struct alignas(16) chunk_state_specialized_tiles {
  static constexpr int ldk = K + 8, ldv = BV + 8;  // 16-byte rows, off one bank
  T w[chunk][ldk];                 // [C, K]
  T keys[chunk][ldk];              // [C, K]
  T values[chunk][ldv];            // [C, BV]  U
  alignas(16) float gates[Slots];  // [Slots]  b or the key rows' decays (16-byte copies)
};

/// The additive family's: no W.
template <class T, int K, int BV, int Slots>
struct alignas(16) chunk_state_specialized_tiles<T, K, BV, false, Slots> {
  static constexpr int ldk = K + 8, ldv = BV + 8;
  T keys[chunk][ldk];              // [C, K]
  T values[chunk][ldv];            // [C, BV]  V
  alignas(16) float gates[Slots];  // [Slots]  b or the key rows' decays (16-byte copies)
};

/// Whether the pass with K keys and BV value columns per block forms each chunk's scores itself
/// (no chunk-local pass; an additive rule, whose only chunk-local product the scores are). The
/// output warps then copy Q and K from the inputs and each forms its 16-row block of the scores
/// (chunk_scores.cuh); no tile comes as a bulk copy, and b = 0 is set once. Every block of a
/// head forms the same scores, which lengthens the output warps' chain per chunk; measured
/// against the chunk-local pass (bench/cuda/NOTES.md) it paid only for Hebbian at K = 64 with
/// 32-column blocks (ScalarDecay's, at any K and width, and Hebbian's with 16 columns or
/// K = 128 were slower), so that is where it runs.
template <class Rule>
constexpr bool specialized_forms_own_scores(int K, int BV) {
  return !corrects<Rule> && Rule::decay == decay_kind::none && K == 64 && BV == 32;
}

/// The output warps' tiles of one chunk.
template <class T, int K, int Slots, bool OwnScores>
struct alignas(16) chunk_state_specialized_output_tiles {
  static constexpr int ldk = K + 8, lds = chunk + 8;
  T queries[chunk][ldk];           // [C, K], then the warps' rows of O [C, BV]
  T scores[chunk][lds];            // [C, C]
  alignas(16) float gates[Slots];  // [Slots]  b or the key rows' decays (16-byte copies)
};

/// ... where the output warps form the scores: K as well, and the scores formed in place.
template <class T, int K, int Slots>
struct alignas(16) chunk_state_specialized_output_tiles<T, K, Slots, true> {
  static constexpr int ldk = K + 8, lds = chunk + 8;
  T queries[chunk][ldk];           // [C, K], then the warps' rows of O [C, BV]
  T keys[chunk][ldk];              // [C, K]
  T scores[chunk][lds];            // [C, C]  each warp's row block, formed by that warp
  alignas(16) float gates[Slots];  // [Slots]  b = 0 (no decay)
};

/// One slot of the hand-over ring.
template <class T, int K, int BV>
struct chunk_state_specialized_slot {
  T state[K][BV + 8];              // [K, BV]  H before the chunk
  T fresh[chunk][BV + 8];          // [C, BV]  U~
};

/// Shared memory of the warp-specialised state pass with `Stages` tile buffers per role. Every
/// tile buffer is a multiple of 128 bytes, so each starts on a 128-byte boundary; 16-byte
/// alignment is what the copies need.
template <class Rule, class T, int K, int BV, int Stages>
struct chunk_state_specialized_buffers {
  static constexpr int slots = state_pass_decays<Rule, K>::slots;
  using tiles = chunk_state_specialized_tiles<T, K, BV, corrects<Rule>, slots>;
  using output_tiles = chunk_state_specialized_output_tiles<T, K, slots, specialized_forms_own_scores<Rule>(K, BV)>;
  static constexpr int role_threads = 128, threads = 2 * role_threads, stages = Stages;
  static constexpr int keys_per_warp = K / 4;
  static constexpr int ldk = tiles::ldk, ldv = tiles::ldv, lds = output_tiles::lds;
  tiles buffer[Stages];                            // [Stages]  the state warps' chunk c in buffer c % Stages
  output_tiles out_buffer[Stages];                 // [Stages]  the output warps' chunk c in out_buffer c % Stages
  chunk_state_specialized_slot<T, K, BV> ring[2];  // [2]  H and U~ of chunk c in ring[c % 2]
  T written[chunk][ldv];                           // [C, BV]  diag(exp(b_C - b)) U~
  std::uint64_t state_arrived[Stages];             // [Stages]  mbarriers: W, K bytes in buffer[i]
  std::uint64_t out_arrived[Stages];               // [Stages]  mbarriers: Q, score bytes in out_buffer[i]

  static_assert(sizeof(tiles) % 128 == 0 && sizeof(output_tiles) % 128 == 0, "buffers on 128-byte boundaries");
  static_assert(ldk == K + pad<T> && lds == chunk + pad<T>, "tile rows as in the workspace (host/plan.cuh)");
};

/// The storage with the most tile buffers per role, from `Stages` down to 2, that fits a block.
template <class Rule, class T, int K, int BV, int Stages = 4>
struct specialized_stages_that_fit {
  using type = std::conditional_t<sizeof(chunk_state_specialized_buffers<Rule, T, K, BV, Stages>) <= max_block_smem,
                                  chunk_state_specialized_buffers<Rule, T, K, BV, Stages>,
                                  typename specialized_stages_that_fit<Rule, T, K, BV, Stages - 1>::type>;
};
template <class Rule, class T, int K, int BV>
struct specialized_stages_that_fit<Rule, T, K, BV, 2> {
  using type = chunk_state_specialized_buffers<Rule, T, K, BV, 2>;
};

template <class Rule, class T, int K, int BV>
using chunk_state_specialized_storage = typename specialized_stages_that_fit<Rule, T, K, BV>::type;

/// Named barriers: 1 and 3 of the state warps, 2 of the output warps; per hand-over slot s,
/// full(s) (the state warps arrive, the output warps wait) and empty(s) (the other way round).
struct specialized_barriers {
  static constexpr int tiles_in = 1, out_tiles_in = 2, written = 3;
  __device__ static constexpr int full(int c) { return 4 + c % 2; }   // slot c % 2 holds chunk c
  __device__ static constexpr int empty(int c) { return 6 + c % 2; }  // chunk c's slot is read
};

/// A tile laid out in global memory as in shared memory: `ld` elements per row, rows 16-byte
/// aligned and adjacent.
template <class T>
struct bulk_tile {
  T* tile;
  int ld;
  const T* from;
};

/// Copies rows [0, n) of each tile with one bulk copy, issued by thread 0 of the `Threads`
/// calling threads and counted together on `arrived`, and zeroes rows [n, Rows).
template <int Rows, int Threads, class T, int N>
__device__ void load_tiles_bulk(const bulk_tile<T> (&tiles)[N], int n, std::uint64_t* arrived, int tid) {
  if (tid == 0) {
    unsigned bytes = 0;
    for (const auto& x : tiles) bytes += unsigned(n * x.ld) * unsigned(sizeof(T));
    mbarrier_expect_bytes(arrived, bytes);
    for (const auto& x : tiles) copy_bulk(x.tile, x.from, unsigned(n * x.ld) * unsigned(sizeof(T)), arrived);
  }
  for (const auto& x : tiles) {
    const int pieces = x.ld * int(sizeof(T)) / 16;
    uint4* rest = reinterpret_cast<uint4*>(x.tile + n * x.ld);  // rows [n, Rows)
    for (int e = tid; e < (Rows - n) * pieces; e += Threads) rest[e] = make_uint4(0, 0, 0, 0);
  }
}

/// The state warps' copies of each chunk into a tile buffer, worked out once per block before
/// the loop over chunks (row sources, tile/load_store.cuh), so that a chunk costs its copies
/// alone: W and K as bulk copies counted on the buffer's mbarrier, U (corrects) or V rows, and
/// the gates (one commit group per thread per chunk).
template <class Rule, class T, int K, int BV, int Threads, bool OwnScores = specialized_forms_own_scores<Rule>(K, BV)>
struct specialized_state_loads {
  row_source<chunk, BV, Threads, T> values;

  __device__ static tensor_view<const T, 4> value_view(const chunk_args<Rule, T>& args) {
    if constexpr (corrects<Rule>) return tensor_view<const T, 4>(args.u);
    else return args.in.v;
  }
  __device__ specialized_state_loads(const chunk_args<Rule, T>& args, index_t b, index_t hv, index_t v0, int tid)
      : values(value_view(args), b, hv, v0, tid) {}

  /// Chunk i (tokens [t0, t0 + n) of batch row b) into `buf`.
  template <class Tiles>
  __device__ void issue(Tiles& buf, std::uint64_t* arrived, const chunk_args<Rule, T>& args, int i, index_t b, int t0, int n,
                        index_t hv, int tid) const {
    const bulk_tile<T> keys{buf.keys[0], Tiles::ldk, &args.keys(b, t0, hv, 0)};
    if constexpr (corrects<Rule>) {
      const bulk_tile<T> tiles[2] = {{buf.w[0], Tiles::ldk, &args.w(b, t0, hv, 0)}, keys};
      load_tiles_bulk<chunk, Threads>(tiles, n, arrived, tid);
    } else {
      const bulk_tile<T> tiles[1] = {keys};
      load_tiles_bulk<chunk, Threads>(tiles, n, arrived, tid);
    }
    values.issue(buf.values[0], Tiles::ldv, value_view(args), t0, n);
    args.template load_gate_cumsum<int(sizeof(Tiles::gates) / sizeof(float))>(buf.gates, i, hv, tid);
    commit_copies();
  }
};

/// ... where the pass forms its scores (an additive rule without a decay): K and V rows from
/// the inputs; no bulk copies, no gates (b = 0, set once by the kernel).
template <class Rule, class T, int K, int BV, int Threads>
struct specialized_state_loads<Rule, T, K, BV, Threads, true> {
  static_assert(!corrects<Rule> && Rule::decay == decay_kind::none, "scores formed in the pass: additive, no decay");
  row_source<chunk, K, Threads, T> keys;
  row_source<chunk, BV, Threads, T> values;

  __device__ specialized_state_loads(const chunk_args<Rule, T>& args, index_t b, index_t hv, index_t v0, int tid)
      : keys(args.state_keys(), b, args.state_head(hv / args.group, hv), 0, tid), values(args.in.v, b, hv, v0, tid) {}

  template <class Tiles>
  __device__ void issue(Tiles& buf, std::uint64_t*, const chunk_args<Rule, T>& args, int, index_t, int t0, int n, index_t,
                        int) const {
    keys.issue(buf.keys[0], Tiles::ldk, args.state_keys(), t0, n);
    values.issue(buf.values[0], Tiles::ldv, args.in.v, t0, n);
    commit_copies();
  }
};

/// The output warps' copies of each chunk, worked out once per block: Q and the chunk-local
/// pass's scores as bulk copies counted on the buffer's mbarrier, and the gates (one commit
/// group per thread per chunk).
template <class Rule, class T, int K, int BV, int Threads, bool OwnScores = specialized_forms_own_scores<Rule>(K, BV)>
struct specialized_output_loads {
  __device__ specialized_output_loads(const chunk_args<Rule, T>&, index_t, index_t, int) {}

  template <class Tiles>
  __device__ void issue(Tiles& buf, std::uint64_t* arrived, const chunk_args<Rule, T>& args, int i, index_t b, int t0, int n,
                        index_t hv, int tid) const {
    const bulk_tile<T> tiles[2] = {{buf.queries[0], Tiles::ldk, &args.queries(b, t0, hv, 0)},
                                   {buf.scores[0], Tiles::lds, &args.scores(b, t0, hv, 0)}};
    load_tiles_bulk<chunk, Threads>(tiles, n, arrived, tid);
    args.template load_gate_cumsum<int(sizeof(Tiles::gates) / sizeof(float))>(buf.gates, i, hv, tid);
    commit_copies();
  }
};

/// ... where the pass forms its scores: Q and K rows from the inputs, no gates.
template <class Rule, class T, int K, int BV, int Threads>
struct specialized_output_loads<Rule, T, K, BV, Threads, true> {
  row_source<chunk, K, Threads, T> queries, keys;

  __device__ specialized_output_loads(const chunk_args<Rule, T>& args, index_t b, index_t hv, int tid)
      : queries(args.state_queries(), b, args.state_head(hv / args.group, hv), 0, tid),
        keys(args.state_keys(), b, args.state_head(hv / args.group, hv), 0, tid) {}

  template <class Tiles>
  __device__ void issue(Tiles& buf, std::uint64_t*, const chunk_args<Rule, T>& args, int, index_t, int t0, int n, index_t,
                        int) const {
    queries.issue(buf.queries[0], Tiles::ldk, args.state_queries(), t0, n);
    keys.issue(buf.keys[0], Tiles::ldk, args.state_keys(), t0, n);
    commit_copies();
  }
};

template <class Rule, class T, int K, int BV>
__global__ void __launch_bounds__(256) chunk_state_specialized_kernel(chunk_args<Rule, T> args) {
  static_assert(sizeof(T) == 2, "the register-resident state pass takes 16-bit inputs");
  static_assert(BV % 16 == 0 && K % 64 == 0, "whole 16-column steps; 16-key steps per warp");
  using S = chunk_state_specialized_storage<Rule, T, K, BV>;
  using bars = specialized_barriers;
  using decays = state_pass_decays<Rule, K>;
  constexpr int NT = BV / 8;  // n-tiles of the block's columns
  constexpr int R = S::role_threads, both = S::threads, P = S::stages;
  constexpr bool own_scores = specialized_forms_own_scores<Rule>(K, BV);  // and no bulk copies
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& smem = *reinterpret_cast<S*>(dynamic_smem);
  const auto slot_state = [&](int c) { return smem.ring[c % 2].state[0]; };
  const auto slot_fresh = [&](int c) { return smem.ring[c % 2].fresh[0]; };

  const index_t n_seq = blockIdx.z, hv = blockIdx.y, v0 = index_t(blockIdx.x) * BV;
  const span s = args.sequence(n_seq);
  const index_t state_slot = args.slot(n_seq);  // state slot (pool); < 0: zero start, no write
  const index_t b = s.b;
  const int end = s.start + s.length, chunks = (s.length + chunk - 1) / chunk;
  const int lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int role_warp = (int(threadIdx.x) % R) / 32, tid = int(threadIdx.x) % R;
  const int r0 = 16 * role_warp;  // the warp's tokens of U~ or O
  const auto col = [&](int nt, int e) { return 8 * nt + 2 * t + (e & 1); };
  const ldm_lane bl = ldm_lane::b_tiles(lane), kl = ldm_lane::kn_tiles(lane);
  std::uint64_t* state_arrived = smem.state_arrived;  // [P], per state buffer
  std::uint64_t* out_arrived = smem.out_arrived;      // [P], per output buffer
  if constexpr (!own_scores) {
    if (threadIdx.x < 2 * P) mbarrier_init(threadIdx.x < P ? state_arrived + threadIdx.x : out_arrived + threadIdx.x - P);
  } else {  // no decay: b = 0 in every buffer, set once
    for (int i = int(threadIdx.x); i < P * chunk; i += both)
      smem.buffer[i / chunk].gates[i % chunk] = 0.0f, smem.out_buffer[i / chunk].gates[i % chunk] = 0.0f;
  }
  __syncthreads();
  // Each role's copies run P - 1 chunks ahead: chunk c's in buffer c % P, its mbarrier in phase
  // (c / P) % 2, its per-thread copies in the thread's group c (one committed per chunk, empty
  // past the last, so that `wait_copies<P - 2>` always leaves exactly the later chunks' pending).

  if (int(threadIdx.x) >= R) {
    // ---- output warps: O of chunk c from slot c % 2 ----
    const auto buffer = [&](int c) -> typename S::output_tiles& { return smem.out_buffer[c % P]; };
    const specialized_output_loads<Rule, T, K, BV, R> loads(args, b, hv, tid);
    const auto load = [&](int c) {
      const int from = s.start + c * chunk;
      if (c < chunks)
        loads.issue(buffer(c), out_arrived + c % P, args, s.first_chunk + c, b, from, min(chunk, end - from), hv, tid);
      else
        commit_copies();
    };
    for (int c = 0; c < P - 1; ++c) load(c);
    for (int c = 0; c < chunks; ++c) {
      const int t0 = s.start + c * chunk, n = min(chunk, end - t0);
      wait_copies<P - 2>();
      if constexpr (!own_scores) mbarrier_wait(out_arrived + c % P, unsigned(c / P) & 1u);
      barrier_sync(bars::out_tiles_in, R);  // chunk c's tiles are in; chunk c - 1's buffer is free
      load(c + P - 1);
      T* queries = buffer(c).queries[0];
      T* scores = buffer(c).scores[0];
      const float* gates = buffer(c).gates;
      if constexpr (own_scores) {  // the warp's row block of the scores, read by the warp alone
        form_chunk_scores<K, 4>(queries, buffer(c).keys[0], S::ldk, nullptr, args.scale, scores, S::lds, role_warp);
        __syncwarp();
      }
      barrier_sync(bars::full(c), both);  // H and U~ of chunk c are in slot c % 2
      const T* state = slot_state(c);
      const T* fresh = slot_fresh(c);
      float o[NT][4] = {};
      mma_rows_kn<T, NT, K / 16>(o, queries + r0 * S::ldk, S::ldk, state, S::ldv, lane);
      const float f[2] = {args.scale * decays::read(gates, r0 + g), args.scale * decays::read(gates, r0 + g + 8)};
      for_tile_elements<BV>(lane, [&](int nt, int e, int, int) { o[nt][e] *= f[e >> 1]; });
      // scores causal: k-steps up to the warp's row block
      mma_rows_kn<T, NT, chunk / 16>(o, scores + r0 * S::lds, S::lds, fresh, S::ldv, lane, role_warp + 1);
      if (c + 2 < chunks) barrier_arrive(bars::empty(c), both);  // the state warps write H of c + 2 there
      // the warp's rows of O, staged in its own (no longer read) query rows
      store_warp_rows(o, queries + r0 * S::ldk, S::ldk, lane, n - r0, args.out, b, t0 + r0, hv, v0);
      // the stores into the query tile (and any zero rows) before the tile's next bulk refill,
      // issued after the next out_tiles_in barrier
      if constexpr (!own_scores) fence_proxy_async_shared();
    }
    return;
  }

  // ---- state warps ----
  constexpr int MT = S::keys_per_warp / 16;  // m-tiles of the warp's key rows
  const int k0 = role_warp * S::keys_per_warp;
  T* written = smem.written[0];
  // H(k0 + 16 m + g + 8 (e >> 1), v0 + 8 nt + 2 t + (e & 1)) = hs[m][nt][e]
  float hs[MT][NT][4];
  const auto key = [&](int m, int e) { return k0 + 16 * m + g + 8 * (e >> 1); };
  // H rounded to T into slot c (4-byte stores of column pairs)
  const auto share_state = [&](int c) {
    T* state = slot_state(c);
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          store_pair(state + key(m, 2 * half) * S::ldv, col(nt, 0), hs[m][nt][2 * half], hs[m][nt][2 * half + 1]);
  };
  // f(m, nt, e) for each of the lane's elements of H
  const auto for_state = [&](auto&& f) {
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) f(m, nt, e);
  };
  // H on this warp's key rows into at(key, value column) (the final state or a checkpoint)
  const auto store_state = [&](auto&& at) {
    for_state([&](int m, int nt, int e) { at(key(m, e), v0 + col(nt, e)) = hs[m][nt][e]; });
  };
  for_state([&](int m, int nt, int e) {
    hs[m][nt][e] = args.s0.data() && state_slot >= 0 ? args.s0(state_slot, hv, key(m, e), v0 + col(nt, e)) : 0.0f;
  });
  share_state(0);

  const auto buffer = [&](int c) -> typename S::tiles& { return smem.buffer[c % P]; };
  const specialized_state_loads<Rule, T, K, BV, R> loads(args, b, hv, v0, tid);
  const auto load = [&](int c) {
    const int from = s.start + c * chunk;
    if (c < chunks)
      loads.issue(buffer(c), state_arrived + c % P, args, s.first_chunk + c, b, from, min(chunk, end - from), hv, tid);
    else
      commit_copies();
  };
  for (int c = 0; c < P - 1; ++c) load(c);
  for (int c = 0; c < chunks; ++c) {
    const int t0 = s.start + c * chunk;
    wait_copies<P - 2>();
    if constexpr (!own_scores) mbarrier_wait(state_arrived + c % P, unsigned(c / P) & 1u);
    barrier_sync(bars::tiles_in, R);  // this chunk's tiles and H are in; chunk c - 1's buffer is free
    load(c + P - 1);
    const typename S::tiles& buf = buffer(c);
    const T* keys = buf.keys[0];
    const T* values = buf.values[0];
    const float* gates = buf.gates;
    const T* state = slot_state(c);
    T* fresh = slot_fresh(c);

    // U~ on this warp's tokens: U - W H (corrects), or V
    float x[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float2 u = unpack2<T>(*reinterpret_cast<const std::uint32_t*>(values + (r0 + g + 8 * half) * S::ldv + col(nt, 0)));
        x[nt][2 * half] = u.x, x[nt][2 * half + 1] = u.y;
      }
    if constexpr (corrects<Rule>) {
      float wh[NT][4] = {};
      mma_rows_kn<T, NT, K / 16>(wh, buf.w[0] + r0 * S::ldk, S::ldk, state, S::ldv, lane);
      for_tile_elements<BV>(lane, [&](int nt, int e, int, int) { x[nt][e] -= wh[nt][e]; });
    }
    // U~ for the output warps, diag(exp(b_C - b)) U~ for the update
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r0 + g + 8 * half;
      const float f = decays::to_end(gates, r);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        store_pair(fresh + r * S::ldv, col(nt, 0), x[nt][2 * half], x[nt][2 * half + 1]);
        store_pair(written + r * S::ldv, col(nt, 0), f * x[nt][2 * half], f * x[nt][2 * half + 1]);
      }
    }
    // `written` is complete and every state warp is done reading H; slot c % 2 holds H and U~
    // of chunk c
    barrier_sync(bars::written, R);
    barrier_arrive(bars::full(c), both);

    // H <- exp(b_C) H + K^T written on this warp's key rows (K^T read transposed from the
    // token-major key tile)
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float decay = decays::of_key(gates, key(m, e));
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) hs[m][nt][e] *= decay;
      }
#pragma unroll
    for (int q = 0; q < chunk / 16; ++q) {
      std::uint32_t ak[MT][4];
#pragma unroll
      for (int m = 0; m < MT; ++m) ldmatrix_x4<true>(ak[m], keys + (16 * q + bl.row) * S::ldk + k0 + 16 * m + bl.col);
#pragma unroll
      for (int p = 0; p < NT / 2; ++p) {
        std::uint32_t bu[4];
        ldmatrix_x4<true>(bu, written + (16 * q + kl.row) * S::ldv + 16 * p + kl.col);
#pragma unroll
        for (int m = 0; m < MT; ++m) mma_pair<T>(hs[m][2 * p], hs[m][2 * p + 1], ak[m], bu);
      }
    }
    if (c + 1 < chunks) {
      if (c >= 1) barrier_sync(bars::empty(c - 1), both);  // the output warps are done with slot (c + 1) % 2
      share_state(c + 1);  // read after the next tiles_in barrier
    }
    if (const int entry = args.checkpoint_entry(min(t0 + chunk, end) - s.start, s.length); entry >= 0)
      store_state([&](index_t k, index_t v) -> float& { return args.checkpoints(n_seq, entry, hv, k, v); });
  }
  if (args.s1.data() && state_slot >= 0)
    store_state([&](index_t k, index_t v) -> float& { return args.s1(state_slot, hv, k, v); });
}

}  // namespace linattn::cuda::detail
