// SPDX-License-Identifier: MIT
/// \file
/// Backward pass 2, the forward state recurrence again: sequential over the chunks of one
/// sequence, for one value head and BV value columns, the state block H = S^T [K, BV] in fp32
/// shared memory; the state at the start of every chunk is written to the workspace
/// (`states`), which the gradient pass reads. Per chunk:
///
///   U~ = U - W H      (delta family, U and W from pass 1; the additive family writes V)
///   H <- Gam_{n-1} H + (diag(e) K)^T U~
/// Per-key decays: H <- diag(Gam_{n-1}) H + (K ⊙ E)^T U~, the rows K ⊙ E and the vector
/// Gam_{n-1} read as chunk_decayed_rows.cuh wrote them. The delta rules write U~ (the chunk's
/// U = T X) for pass 4 to `u_rows`, which is pass 1's T V in place (fp32 hand-over).
#pragma once

#include <array>
#include <cstddef>

#include "../../tile/block_gemm.cuh"
#include "chunk_decayed_rows.cuh"
#include "chunk_factors.cuh"

namespace linattn::cuda::detail {

/// The value-column widths of the fp32 state passes' blocks, narrowest first.
inline constexpr std::array<int, 3> state_pass_widths = {16, 32, 64};

/// Value columns per block of the state passes: the narrowest of state_pass_widths with which
/// the blocks of both passes (2 head_blocks V / BV, `head_blocks` = sequences x value heads)
/// are all resident at once, `resident[i]` blocks per multiprocessor at width i. The passes are
/// sequential over chunks, so a second wave of blocks costs a second pass's time, and among the
/// shapes that fit, narrower blocks take shorter steps. When none fits, the widest: fewer steps
/// in all, each reading a chunk's rows once for more columns. (Measured on an H200 for bf16 KDA
/// and VectorDecay, whose kernels fit one and two blocks per multiprocessor, before their bf16
/// passes moved to state_passes_mma.cuh; these passes now serve fp32 and fp16 inputs:
/// bench/cuda/README.md, wave 2 session 29.)
inline int backward_state_columns(index_t head_blocks, index_t V, index_t multiprocessors,
                                  const std::array<int, 3>& resident) {
  for (std::size_t i = 0; i < state_pass_widths.size(); ++i) {
    const int bv = state_pass_widths[i];
    if (V % bv == 0 && 2 * head_blocks * (V / bv) <= multiprocessors * index_t(resident[i])) return bv;
  }
  return V % 64 == 0 ? 64 : V % 32 == 0 ? 32 : 16;
}

template <int K, int BV_, bool PerKey = false>
struct chunk_states_storage {
  static constexpr int warps = 8, threads = 32 * warps, BV = BV_;
  static constexpr int C = backward_chunk, ldk = K + 4, ldb = BV + 4;
  float h[K][ldb];        // [K, BV]  H
  float keys_e[C][ldk];   // [C, K]   diag(e) K
  float w[C][ldk];        // [C, K]   W (delta family)
  float u[C][ldb];        // [C, BV]  U, then U~ (or V)
  chunk_coefficients cf;
  float stage[warps][stage_floats];
  float decay[PerKey ? K : 1];  // [K]  Gam_{n-1} (per-key decays; last: not a product operand)
};

/// The pass for sequence n_seq, value head blockIdx.y, value columns blockIdx.x * BV, on the
/// whole block (chunk_state_passes.cuh launches it).
template <class Rule, class T, int K, int BV_>
__device__ void chunk_states_pass(const backward_args<Rule, T>& args, index_t n_seq, unsigned char* smem) {
  constexpr bool per_key = Rule::decay == decay_kind::vector;
  using S = chunk_states_storage<K, BV_, per_key>;
  using P = backward_products<T>;
  constexpr int C = S::C, BV = S::BV, Th = S::threads;
  constexpr bool delta = corrects<Rule>;
  S& s = *reinterpret_cast<S*>(smem);
  const index_t hv = blockIdx.y, v0 = index_t(blockIdx.x) * BV, h = hv / args.group;
  const int V = args.in.v.extent(3);
  const span seq = args.template sequence<backward_chunk>(n_seq);
  const index_t b = seq.b;
  const int end = seq.start + seq.length;
  float* stage = s.stage[0];
  load_state_block<K, BV>(s.h, args.s0, n_seq, hv, v0);
  // The next chunk's rows and gates are loaded while the current one is computed.
  // The delta family reads U (pass 1); per-key decays read K ⊙ E of value head hv.
  const auto values = workspace_or_input<delta>(args.u_rows, args.in.v);
  const auto keys = workspace_or_input<per_key>(args.keys_end, args.in.k);
  chunk_rows<K, Th, typename decltype(keys)::value_type> kr;
  chunk_rows<K, Th, float> wr;
  chunk_rows<BV, Th, typename decltype(values)::value_type> ur;
  chunk_decay_vector<K> dr;
  float gate = 0.0f;
  const auto issue = [&](int t0, int c) {
    const int n = min(C, end - t0);
    kr.issue(keys, b, t0, n, per_key ? hv : h);
    if constexpr (delta) wr.issue(args.w_fwd, b, t0, n, hv);
    ur.issue(values, b, t0, n, hv, v0);
    if constexpr (per_key) dr.issue(args, seq.first_chunk + c, hv);
    else gate = lane_gate(args, b, t0, n, hv);
  };
  if (seq.length > 0) issue(seq.start, 0);
  for (int c = 0, t0 = seq.start; t0 < end; ++c, t0 += C) {
    if constexpr (per_key) dr.store(s.decay);
    else chunk_decays(gate, s.cf);
    __syncthreads();  // H complete (previous chunk), decays visible
    store_state_block<K, BV>(args.chunk_states(args.states, K, V), s.h, seq.first_chunk + c, hv, v0);
    if constexpr (per_key) kr.store(s.keys_e[0], S::ldk);  // K ⊙ E as read
    else kr.store(s.keys_e[0], S::ldk, [&](int r) { return s.cf.e[r]; });
    if constexpr (delta) wr.store(s.w[0], S::ldk);
    ur.store(s.u[0], S::ldb);
    if (t0 + C < end) issue(t0 + C, c + 1);
    __syncthreads();
    if constexpr (delta) {
      block_gemm_split_k<P, row_major, row_major, C, BV, K>(s.w[0], S::ldk, s.h[0], S::ldb, stage,
          tile_epilogue<tile_update::subtract>(s.u));  // U~ = U - W H
      __syncthreads();
      const int n = min(C, end - t0);  // over the chunk's rows of T V (read above)
      for (int e = int(threadIdx.x); e < n * BV; e += int(blockDim.x))
        args.u_rows(b, t0 + e / BV, hv, v0 + e % BV) = s.u[e / BV][e % BV];
    }
    block_gemm<P, col_major, row_major, K, BV, C>(s.keys_e[0], S::ldk, s.u[0], S::ldb, stage,
        decayed_state_update<per_key>(s.h, s.decay, s.cf));
    __syncthreads();  // the chunk's tiles and coefficients are free again
  }
}

}  // namespace linattn::cuda::detail
