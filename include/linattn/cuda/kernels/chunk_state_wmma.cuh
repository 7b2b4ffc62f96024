// SPDX-License-Identifier: MIT
/// \file
/// Chunkwise form, pass 2 for fp32 inputs (docs/math.md#delta-chunkwise steps 7-9 and docs/math.md#gated-delta-chunkwise; 16-bit inputs take
/// chunk_state_mma.cuh): sequential over the chunks of one sequence, for one value head and a block of BV value columns. The state block
/// H = S^T [K, BV] stays in shared memory in fp32 for the whole sequence:
///
///   U~  = U - W H                                   (additive family: U~ = V)
///   O   = scale diag(exp b) Q H + scores U~
///   H  <- exp(b_C) H + K^T diag(exp(b_C - b)) U~
///
/// (per-key decays: Q and K come pre-scaled and H decays per key row, state_pass_decays.cuh)
/// The next chunk's tiles are copied asynchronously while the current one is computed (two
/// tile buffers where shared memory allows, else one).
#pragma once

#include <type_traits>

#include "../tile/async_copy.cuh"
#include "../tile/block_gemm.cuh"
#include "../tile/dims.cuh"
#include "../tile/load_store.cuh"
#include "chunk_args.cuh"
#include "rule_coefficients.cuh"
#include "state_pass_decays.cuh"

namespace linattn::cuda::detail {

/// One chunk's tiles in shared memory; `Slots` decays (state_pass_decays.cuh).
template <class T, int K, int BV, int Slots>
struct alignas(128) chunk_state_wmma_tiles {
  static constexpr int ldk = K + pad<T>, ldb = BV + pad<T>, ldc = chunk + pad<T>;
  T wq[2 * chunk][ldk];        // [2C, K]  W rows, then Q rows (one operand: [W; Q] H)
  T keys[chunk][ldk];          // [C, K]
  T values[chunk][ldb];        // [C, BV]  U or V
  T scores[chunk][ldc];        // [C, C]
  alignas(16) float gates[Slots];  // [Slots]  b or the key rows' decays (16-byte copies)
};

/// Shared memory of the fp32 state pass: the state, the chunk's intermediates, and `Buffers`
/// tile buffers (chunk_state_wmma_storage: two where they fit).
template <class T, int K, int BV, int Slots, int Buffers>
struct chunk_state_wmma_buffers {
  using tiles = chunk_state_wmma_tiles<T, K, BV, Slots>;
  static constexpr int warps = 16, threads = 32 * warps, buffers = Buffers;
  static constexpr int ldk = tiles::ldk, ldb = tiles::ldb, ldc = tiles::ldc, ldh = BV + 4;
  float h[K][ldh];                   // [K, BV]  H = S^T, this block's columns
  T h_op[K][ldb];                    // [K, BV]  H as a product operand
  float o[chunk][ldh];               // [C, BV]  scale diag(exp b) Q H
  T vn[chunk][ldb];                  // [C, BV]  U~
  T vn_decayed[chunk][ldb];          // [C, BV]  diag(exp(b_C - b)) U~
  float stage[warps][stage_floats];  // [warps][16, 20]  block_gemm's per-warp tiles
  tiles buffer[Buffers];             // [Buffers]  chunk c in buffer c % Buffers
};

template <class Rule, class T, int K, int BV, int Slots = state_pass_decays<Rule, K>::slots>
using chunk_state_wmma_storage = std::conditional_t<sizeof(chunk_state_wmma_buffers<T, K, BV, Slots, 2>) <= max_block_smem,
                                                    chunk_state_wmma_buffers<T, K, BV, Slots, 2>,
                                                    chunk_state_wmma_buffers<T, K, BV, Slots, 1>>;

/// Queues the copies of one chunk's tiles into `buf` (one commit group per thread).
template <int Threads, class Rule, class T, int K, int BV, int Slots>
__device__ void load_chunk(chunk_state_wmma_tiles<T, K, BV, Slots>& buf, const chunk_args<Rule, T>& args, int i, index_t b,
                           int t0, int n, index_t hv, index_t h, index_t v0) {
  using Tiles = chunk_state_wmma_tiles<T, K, BV, Slots>;
  T* wq = buf.wq[0];
  if constexpr (corrects<Rule>) {
    load_rows<chunk, K, Threads>(wq, Tiles::ldk, tensor_view<const T, 4>(args.w), b, t0, n, hv);
    load_rows<chunk, BV, Threads>(buf.values[0], Tiles::ldb, tensor_view<const T, 4>(args.u), b, t0, n, hv, v0);
  } else {
    load_rows<chunk, BV, Threads>(buf.values[0], Tiles::ldb, args.in.v, b, t0, n, hv, v0);
  }
  const index_t qk = args.state_head(h, hv);
  load_rows<chunk, K, Threads>(wq + chunk * Tiles::ldk, Tiles::ldk, args.state_queries(), b, t0, n, qk);
  load_rows<chunk, K, Threads>(buf.keys[0], Tiles::ldk, args.state_keys(), b, t0, n, qk);
  load_rows<chunk, chunk, Threads>(buf.scores[0], Tiles::ldc, tensor_view<const T, 4>(args.scores), b, t0, n, hv);
  args.template load_gate_cumsum<Slots>(buf.gates, i, hv, int(threadIdx.x));
  commit_copies();
}

/// `Op`: the precision of the block products, as for chunk_local_wmma_kernel.
template <class Rule, class T, int K, int BV, class Op = T>
__global__ void __launch_bounds__(512) chunk_state_wmma_kernel(chunk_args<Rule, T> args) {
  static_assert(std::is_same_v<T, float>, "the WMMA state pass takes fp32 inputs");
  using S = chunk_state_wmma_storage<Rule, T, K, BV>;
  using decays = state_pass_decays<Rule, K>;
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& smem = *reinterpret_cast<S*>(dynamic_smem);
  float* hs = smem.h[0];
  T* h_op = smem.h_op[0];
  float* o = smem.o[0];
  T* vn = smem.vn[0];
  T* vn_decayed = smem.vn_decayed[0];
  float* stage = smem.stage[0];

  // value-column blocks fastest: the blocks of one head run together and share its tiles in L2
  const index_t n_seq = blockIdx.z, hv = blockIdx.y, v0 = index_t(blockIdx.x) * BV;
  const index_t h = hv / args.group;
  const span s = args.sequence(n_seq);
  const index_t state_slot = args.slot(n_seq);  // state slot (pool); < 0: zero start, no write
  const index_t b = s.b;
  const int tid = int(threadIdx.x);
  const int end = s.start + s.length;

  for (int e = tid; e < K * BV; e += int(blockDim.x)) {
    const int i = e / BV, j = e % BV;
    const float x = args.s0.data() && state_slot >= 0 ? args.s0(state_slot, hv, i, v0 + j) : 0.0f;
    hs[i * S::ldh + j] = x;
    h_op[i * S::ldb + j] = from_float<T>(x);
  }
  // H [K, BV] into at(i, v) (the final state or a checkpoint)
  const auto store_state = [&](auto&& at) {
    for (int e = tid; e < K * BV; e += int(blockDim.x)) at(e / BV, v0 + e % BV) = hs[(e / BV) * S::ldh + e % BV];
  };
  const auto buffer = [&](int c) -> typename S::tiles& { return smem.buffer[c % S::buffers]; };
  if (s.length > 0) load_chunk<S::threads>(buffer(0), args, s.first_chunk, b, s.start, min(chunk, s.length), hv, h, v0);

  for (int c = 0, t0 = s.start; t0 < end; ++c, t0 += chunk) {
    const int n = min(chunk, end - t0);
    if constexpr (S::buffers == 2) {
      if (t0 + chunk < end) {
        load_chunk<S::threads>(buffer(c + 1), args, s.first_chunk + c + 1, b, t0 + chunk, min(chunk, end - t0 - chunk), hv, h, v0);
        wait_copies<1>();
      } else {
        wait_copies<0>();
      }
    } else {
      if (c > 0) load_chunk<S::threads>(buffer(c), args, s.first_chunk + c, b, t0, n, hv, h, v0);
      wait_copies<0>();
    }
    __syncthreads();  // this chunk's tiles are in; the state update of the last chunk is done
    const typename S::tiles& buf = buffer(c);
    const T* wq = buf.wq[0];
    const T* keys = buf.keys[0];
    const T* values = buf.values[0];
    const T* scores = buf.scores[0];
    const float* gates = buf.gates;
    const float scale = args.scale;

    // [W; Q] H: the first C rows give U~ = U - W H, the next C rows the inter-chunk read.
    auto read = [&](int r, int j, const float (&x)[8]) {
      if (r < chunk) {
        float v[8], d[8];
        load8(values + r * S::ldb + j, v);
        const float to_end = decays::to_end(gates, r);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] -= x[e], d[e] = to_end * v[e];
        store8_aligned(vn + r * S::ldb + j, v);
        store8_aligned(vn_decayed + r * S::ldb + j, d);
      } else {
        const float from_start = scale * decays::read(gates, r - chunk);
#pragma unroll
        for (int e = 0; e < 8; ++e) o[(r - chunk) * S::ldh + j + e] = from_start * x[e];
      }
    };
    if constexpr (corrects<Rule>) {
      block_gemm<Op, row_major, row_major, 2 * chunk, BV, K>(wq, S::ldk, h_op, S::ldb, stage, read);
    } else {
      block_gemm<Op, row_major, row_major, chunk, BV, K>(wq + chunk * S::ldk, S::ldk, h_op, S::ldb, stage,
                                                        [&](int r, int j, const float (&x)[8]) { read(r + chunk, j, x); });
      for (int e = tid; e < chunk * BV; e += int(blockDim.x)) {
        const int r = e / BV, j = e % BV;
        vn[r * S::ldb + j] = values[r * S::ldb + j];
        vn_decayed[r * S::ldb + j] = from_float<T>(decays::to_end(gates, r) * to_float(values[r * S::ldb + j]));
      }
    }
    __syncthreads();
    // O = read + scores U~ (scores are lower triangular)
    block_gemm<Op, row_major, row_major, chunk, BV, chunk, true>(scores, S::ldc, vn, S::ldb, stage,
        [&](int r, int j, const float (&x)[8]) {
          if (r >= n) return;
          float y[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) y[e] = o[r * S::ldh + j + e] + x[e];
          store8(args.out, b, t0 + r, hv, v0 + j, y);
        });
    // H <- exp(b_C) H + K^T diag(exp(b_C - b)) U~
    const float row0_decay = decays::of_key(gates, 0);  // every row's, for scalar decays
    block_gemm<Op, col_major, row_major, K, BV, chunk>(keys, S::ldk, vn_decayed, S::ldb, stage,
        [&](int i, int j, const float (&x)[8]) {
          const float decay = decays::per_key ? decays::of_key(gates, i) : row0_decay;
          float y[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) y[e] = decay * hs[i * S::ldh + j + e] + x[e];
#pragma unroll
          for (int e = 0; e < 8; ++e) hs[i * S::ldh + j + e] = y[e];
          store8_aligned(h_op + i * S::ldb + j, y);
        });
    __syncthreads();  // the buffer of this chunk may be refilled; H is complete
    if (const int entry = args.checkpoint_entry(min(t0 + chunk, end) - s.start, s.length); entry >= 0)
      store_state([&](int i, index_t v) -> float& { return args.checkpoints(n_seq, entry, hv, i, v); });
  }
  __syncthreads();
  if (args.s1.data() && state_slot >= 0) store_state([&](int i, index_t v) -> float& { return args.s1(state_slot, hv, i, v); });
}

}  // namespace linattn::cuda::detail
