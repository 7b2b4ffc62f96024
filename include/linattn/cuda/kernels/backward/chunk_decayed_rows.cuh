// SPDX-License-Identifier: MIT
/// \file
/// Backward pass 1 of the per-key decays (VectorDecay, KDA; docs/backward.md#cuda-per-key),
/// independent for every chunk and value head: the decayed rows that the two state passes take
/// as product operands, so that their sequential steps form no cumsum and take no
/// exponentials. With b [C, K] the chunk's log-gate cumsum (key_decays.cuh):
///
///   keys_end      = K ⊙ E          E = exp(b_{n-1} - b)   [C, K]   pass 2's state write
///   queries_start = scale Q ⊙ Gam  Gam = exp(b)           [C, K]   pass 3
///   keys_start    = -K ⊙ Gam                              [C, K]   pass 3 (delta family)
///   chunk_decay   = Gam_{n-1}                             [K]      both passes' state decay
///
/// The values are the ones the passes formed for themselves before (the same fp32 operations),
/// so the gradients do not change; what changes is that each is formed once per chunk, in a
/// launch parallel over the chunks, instead of inside the passes' sequential chunk loops. The
/// rows are stored as workspace_row_t: bf16 for bf16 inputs, whose register-resident state
/// passes round every product operand to bf16 anyway.
#pragma once

#include "chunk_factors.cuh"
#include "key_decays.cuh"

namespace linattn::cuda::detail {

template <int K>
struct chunk_decayed_rows_storage {
  static constexpr int warps = 8, threads = 32 * warps;
  static constexpr int C = backward_chunk, ldk = K + 4;
  float b[C][ldk];  // [C, K]  log gates, then their cumsum
  float q[C][ldk];  // [C, K]  q (unscaled)
  float k[C][ldk];  // [C, K]
};

template <class Rule, class T, int K>
__global__ void __launch_bounds__(256) chunk_decayed_rows_kernel(backward_args<Rule, T> args) {
  using S = chunk_decayed_rows_storage<K>;
  constexpr int C = S::C, ldk = S::ldk;
  constexpr bool delta = corrects<Rule>;
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  S& s = *reinterpret_cast<S*>(dynamic_smem);
  const auto [b, t0, hv, n] = args.block_chunk();
  const index_t h = hv / args.group;
  {
    chunk_rows<K, S::threads, T> qr, kr;
    key_gate_rows<K, S::threads> gr;
    qr.issue(args.in.q, b, t0, n, h), kr.issue(args.in.k, b, t0, n, h);
    gr.issue(args, b, t0, n, hv);
    qr.store(s.q[0], ldk), kr.store(s.k[0], ldk);
    gr.store(s.b[0], ldk);
  }
  __syncthreads();
  column_cumsum<K>(s.b[0], ldk);
  __syncthreads();
  using R = typename backward_args<Rule, T>::row_type;  // bf16 for the register-resident state passes
  const float scale = args.scale;
  for (int e = int(threadIdx.x); e < n * K; e += int(blockDim.x)) {
    const int r = e / K, d = e % K;
    const float br = s.b[r][d], kd = s.k[r][d];
    args.keys_end(b, t0 + r, hv, d) = from_float<R>(kd * __expf(s.b[C - 1][d] - br));
    const float gam = __expf(br);
    args.queries_start(b, t0 + r, hv, d) = from_float<R>(scale * s.q[r][d] * gam);
    if constexpr (delta) args.keys_start(b, t0 + r, hv, d) = from_float<R>(-(kd * gam));
  }
  float* decay = args.chunk_decay_at(int(blockIdx.x), hv, K);
  for (int d = int(threadIdx.x); d < K; d += int(blockDim.x)) decay[d] = __expf(s.b[C - 1][d]);
}

/// How a state pass reads a chunk's Gam_{n-1} [K]: one element per thread, held in a register
/// between `issue` (with the chunk's rows, ahead of its step) and `store`.
template <int K>
struct chunk_decay_vector {
  static_assert(K <= 256, "one element per thread of the state passes' blocks");
  float x = 0.0f;
  template <class Args>
  __device__ void issue(const Args& args, int chunk, index_t hv) {
    if (int(threadIdx.x) < K) x = args.chunk_decay_at(chunk, hv, K)[threadIdx.x];
  }
  __device__ void store(float* decay) const {
    if (int(threadIdx.x) < K) decay[threadIdx.x] = x;
  }
};

/// The state passes' update, an epilogue for block_gemm: h[i][j] <- Gam_{n-1} h[i][j] + the
/// product, Gam_{n-1} of key row i (`decay` [K], per-key decays) or of the chunk (cf.gam[C - 1]).
template <bool PerKey, int ld>
__device__ auto decayed_state_update(float (*h)[ld], const float* decay, const chunk_coefficients& cf) {
  return [h, decay, &cf](int i, int j, const float (&x)[8]) {
    float d;
    if constexpr (PerKey) d = decay[i];
    else d = cf.gam[backward_chunk - 1];
#pragma unroll
    for (int e = 0; e < 8; ++e) h[i][j + e] = d * h[i][j + e] + x[e];
  };
}

}  // namespace linattn::cuda::detail
