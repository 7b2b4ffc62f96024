// SPDX-License-Identifier: MIT
/// \file
/// Backward pass 3, the state-gradient recurrence (launched with pass 2: chunk_state_passes.cuh;
/// it needs pass 1 only): sequential over the chunks of one sequence
/// in reverse, for one value head and BV value columns, dH (the gradient of the state at the
/// chunk's end, [K, BV]) in fp32 shared memory; it is written to the workspace
/// (`state_grads`) before every chunk, and dL/d(initial state) at the end. Per chunk:
///
///   dY  = Wb dH + dYl,  dX = diag(beta) dY   (delta family; Wb, dYl, beta from pass 1)
///   dH <- Gam_{n-1} dH + [diag(Gam) Q; -diag(Gam) K]^T [dO; dX]   (additive: the Q rows only)
/// Per-key decays: dH <- diag(Gam_{n-1}) dH + [Q ⊙ Gam; -K ⊙ Gam]^T [dO; dX], the rows and
/// Gam_{n-1} read as chunk_decayed_rows.cuh wrote them. The delta rules hand dY to pass 4:
/// pass 1's rows are Wb = M^T diag(e) K (per-key: M^T (K ⊙ E)) and
/// dYl = M^T P^T dO, the product gives dY = Wb dH + dYl, written to `dy_rows` (over dYl: the
/// fp32 hand-over), and the update takes
/// dX = diag(beta) dY through its left rows, -diag(beta Gam) K (-diag(beta) (K ⊙ Gam)).
#pragma once

#include "../../tile/block_gemm.cuh"
#include "chunk_decayed_rows.cuh"
#include "chunk_factors.cuh"

namespace linattn::cuda::detail {

template <int K, int BV_, bool PerKey = false>
struct chunk_state_grads_storage {
  static constexpr int warps = 8, threads = 32 * warps, BV = BV_;
  static constexpr int C = backward_chunk, ldk = K + 4, ldb = BV + 4;
  float dh[K][ldb];        // [K, BV]   dH
  float left[2 * C][ldk];  // [2C, K]   [diag(Gam) Q; -diag(beta Gam) K]
  float right[2 * C][ldb]; // [2C, BV]  [dO; dY]
  float wb[C][ldk];        // [C, K]    Wb (delta family)
  chunk_coefficients cf;
  float stage[warps][stage_floats];
  float decay[PerKey ? K : 1];  // [K]  Gam_{n-1} (per-key decays; last: not a product operand)
};

/// The pass for sequence n_seq, value head blockIdx.y, value columns blockIdx.x * BV, on the
/// whole block (chunk_state_passes.cuh launches it).
template <class Rule, class T, int K, int BV_>
__device__ void chunk_state_grads_pass(const backward_args<Rule, T>& args, index_t n_seq, unsigned char* smem) {
  constexpr bool per_key = Rule::decay == decay_kind::vector;
  using S = chunk_state_grads_storage<K, BV_, per_key>;
  using P = backward_products<T>;
  constexpr int C = S::C, BV = S::BV, Th = S::threads;
  constexpr bool delta = corrects<Rule>;
  constexpr int rows = delta ? 2 * C : C;
  S& s = *reinterpret_cast<S*>(smem);
  const index_t hv = blockIdx.y, v0 = index_t(blockIdx.x) * BV, h = hv / args.group;
  const int V = args.in.v.extent(3);
  const span seq = args.template sequence<backward_chunk>(n_seq);
  const index_t b = seq.b;
  const float scale = args.scale;
  float* stage = s.stage[0];
  load_state_block<K, BV>(s.dh, args.ds1, n_seq, hv, v0);
  // The previous chunk's rows and gates are loaded while the current one is computed.
  // Per-key decays read scale Q ⊙ Gam and -K ⊙ Gam of value head hv instead of q and k.
  const auto queries = workspace_or_input<per_key>(args.queries_start, args.in.q);
  const auto keys = workspace_or_input<per_key>(args.keys_start, args.in.k);
  const index_t key_head = per_key ? hv : h;
  chunk_rows<K, Th, typename decltype(queries)::value_type> qr, kr;
  chunk_rows<K, Th, float> wbr;
  chunk_rows<BV, Th, T> dor;
  chunk_rows<BV, Th, float> dxr;
  chunk_decay_vector<K> dr;
  float gate = 0.0f, beta = 0.0f;  // the lane's token's (beta: delta family)
  const auto issue = [&](int c) {
    const int t0 = seq.start + c * C, n = min(C, seq.start + seq.length - t0);
    if constexpr (delta) beta = lane_beta(args, b, t0, n, hv);
    qr.issue(queries, b, t0, n, key_head);
    dor.issue(args.dout, b, t0, n, hv, v0);
    if constexpr (delta) {
      kr.issue(keys, b, t0, n, key_head);
      wbr.issue(args.w_bwd, b, t0, n, hv);
      dxr.issue(args.dy_rows, b, t0, n, hv, v0);
    }
    if constexpr (per_key) dr.issue(args, seq.first_chunk + c, hv);
    else gate = lane_gate(args, b, t0, n, hv);
  };
  const int chunks = (seq.length + C - 1) / C;
  if (chunks > 0) issue(chunks - 1);
  for (int c = chunks - 1; c >= 0; --c) {
    if constexpr (per_key) dr.store(s.decay);
    else chunk_decays(gate, s.cf);
    if (delta && threadIdx.x < 32) s.cf.beta[threadIdx.x] = beta;
    __syncthreads();  // dH complete (previous chunk), decays visible
    store_state_block<K, BV>(args.chunk_states(args.state_grads, K, V), s.dh, seq.first_chunk + c, hv, v0);
    if constexpr (per_key) qr.store(s.left[0], S::ldk);  // scale Q ⊙ Gam as read
    else qr.store(s.left[0], S::ldk, [&](int r) { return s.cf.gam[r] * scale; });
    dor.store(s.right[0], S::ldb);
    if constexpr (delta) {
      if constexpr (per_key) kr.store(s.left[C], S::ldk, [&](int r) { return s.cf.beta[r]; });  // -K ⊙ Gam as read, times beta
      else kr.store(s.left[C], S::ldk, [&](int r) { return -(s.cf.beta[r] * s.cf.gam[r]); });
      wbr.store(s.wb[0], S::ldk);
      dxr.store(s.right[C], S::ldb);
    }
    if (c > 0) issue(c - 1);
    __syncthreads();
    if constexpr (delta) {
      block_gemm_split_k<P, row_major, row_major, C, BV, K>(s.wb[0], S::ldk, s.dh[0], S::ldb, stage,
          [&](int r, int j, const float (&x)[8]) {
#pragma unroll
            for (int e = 0; e < 8; ++e) s.right[C + r][j + e] += x[e];  // dY = Wb dH + dYl
          });
      __syncthreads();
      const int t0 = seq.start + c * C, n = min(C, seq.start + seq.length - t0);  // over the rows of dYl (read above)
      for (int e = int(threadIdx.x); e < n * BV; e += int(blockDim.x))
        args.dy_rows(b, t0 + e / BV, hv, v0 + e % BV) = s.right[C + e / BV][e % BV];
    }
    block_gemm<P, col_major, row_major, K, BV, rows>(s.left[0], S::ldk, s.right[0], S::ldb, stage,
        decayed_state_update<per_key>(s.dh, s.decay, s.cf));
    __syncthreads();
  }
  if (args.ds0.data()) store_state_block<K, BV>(args.ds0, s.dh, n_seq, hv, v0);
}

}  // namespace linattn::cuda::detail
