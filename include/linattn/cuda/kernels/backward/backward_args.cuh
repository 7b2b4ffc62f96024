// SPDX-License-Identifier: MIT
/// \file
/// Arguments of the chunkwise backward kernels: the forward call's (call_args.cuh), the
/// incoming gradients, the gradient outputs, and the workspace through which the four passes
/// hand over the chunk states, their gradients and the delta rules' chunk products. The
/// backward blocks a sequence in chunks of `backward_chunk` tokens (independent of the
/// forward's chunk: the gradients do not depend on it).
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "../../../core/backward.hpp"
#include "../../../core/tensor_view.hpp"
#include "../call_args.cuh"
#include "../rule_coefficients.cuh"

namespace linattn::cuda::detail {

/// Chunk length of the CUDA backward: one warp's width, so that a chunk's gate cumsum is one
/// warp scan and its fp32 tiles fit in shared memory beside each other.
inline constexpr int backward_chunk = 32;

/// Whether the backward's state passes keep the state in registers (state_passes_mma.cuh,
/// else chunk_state_passes.cuh): bf16 inputs.
template <class Rule, class T>
inline constexpr bool register_state_passes = std::is_same_v<T, __nv_bfloat16>;

/// The element type of the workspace's rows that the state passes take as product operands
/// (W, Wb; per-key decays: K ⊙ E, scale Q ⊙ Gam, -K ⊙ Gam): bf16 where the register-resident
/// state passes run, because their products round every operand to bf16 (the same bits, half
/// the bytes); else fp32.
template <class Rule, class T>
using workspace_row_t = std::conditional_t<register_state_passes<Rule, T>, __nv_bfloat16, float>;

/// The element type of the workspace's chunk states and state gradients: bf16 where the
/// register-resident state passes run with scalar or no gates (pass 4 rounds them to bf16
/// when it stages them); fp32 for per-key decays, whose pass 4 reads them as fp32 tiles.
template <class Rule, class T>
using workspace_state_t =
    std::conditional_t<register_state_passes<Rule, T> && Rule::decay != decay_kind::vector, __nv_bfloat16, float>;

/// The element type of the delta family's value rows in the workspace: pass 1's U = T V and
/// dYl = M^T P^T dO, over which the state passes write their hand-over to pass 4 in place, the
/// corrected values U~ = U - W H and the value gradients dY = Wb dH + dYl. bf16 where the states
/// are bf16 (register-resident state passes, scalar or no gates): those passes round U~ and dY
/// to bf16 for their own products and pass 4 for its products with a state, so the rows carry
/// bf16 both ways (half the bytes of the passes that are bound by memory) and pass 4's other
/// products read them exactly (no lo terms). Else fp32.
template <class Rule, class T>
using workspace_hand_over_t = workspace_state_t<Rule, T>;

template <class Rule, class T>
struct backward_args : call_args<Rule, T> {
  using grads_t = gradients_t<Rule, T>;
  using state_type = workspace_state_t<Rule, T>;
  using row_type = workspace_row_t<Rule, T>;
  using hand_over_type = workspace_hand_over_t<Rule, T>;

  tensor_view<const T, 4> dout;          // [B, T, HV, V]  dL/d(out)
  grads_t grads;                         // dq, dk [B, T, H, K], dv [B, T, HV, V], dg / dbeta [B, T, HV]
  coefficient_gradient_view<T, 3> dbeta;  // [B, T, HV]  dL/d(the input of beta): Rule::beta_gradient(grads), or unset
  tensor_view<const float, 4> ds1;       // [N, HV, K, V]  dL/d(final state), or not given (zero)
  tensor_view<float, 4> ds0;             // [N, HV, K, V]  dL/d(initial state), or not given
  const span* chunks = nullptr;          // [chunks] of backward_chunk tokens, or null: `length` tokens per batch row
  int heads_v = 0;                       // HV
  int chunk_count = 0;                   // chunks of the call
  // workspace (host/backward_plan.cuh)
  state_type* states = nullptr;          // [chunks, HV, K, V]  the state at the start of every chunk (H = S^T)
  state_type* state_grads = nullptr;     // [chunks, HV, K, V]  dL/d(the state at the end of every chunk)
  tensor_view<row_type, 4> w_fwd;        // [B, T, HV, K]  T diag(Gam) K     (delta family)
  tensor_view<hand_over_type, 4> u_rows;   // [B, T, HV, V]  T V, then pass 2's U~ = T V - W H (the chunks' U)
  tensor_view<row_type, 4> w_bwd;        // [B, T, HV, K]  M^T diag(e) K     (per-key decays: M^T (K ⊙ E))
  tensor_view<hand_over_type, 4> dy_rows;  // [B, T, HV, V]  dYl = M^T P^T dO, then pass 3's dY = Wb dH + dYl
  tensor_view<float, 3> betas;           // [B, T, HV]     beta of every token (delta family: pass 1 for pass 3)
  tensor_view<float, 4> dq_parts, dk_parts;  // [B, T, HV, K]  dQ, dK of each value head (per-key decays)
  // per-key decays, from chunk_decayed_rows for the state passes (keys_end and queries_start
  // share the memory of dq_parts and dk_parts, which pass 4 writes after the state passes)
  tensor_view<row_type, 4> keys_end, queries_start, keys_start;  // [B, T, HV, K]  K ⊙ E, scale Q ⊙ Gam, -K ⊙ Gam
  float* chunk_decay = nullptr;          // [chunks, HV, K]  Gam_{n-1} of every chunk

  backward_args(const typename Rule::template inputs<T>& in, const tensor_view<const T, 4>& grad_out, const grads_t& g,
                const tensor_view<const float, 4>& s0, const tensor_view<const float, 4>& grad_s1,
                const tensor_view<float, 4>& grad_s0, const linattn::detail::problem& p)
      : call_args<Rule, T>(in, tensor_view<T, 4>{}, s0, tensor_view<float, 4>{}, p), dout(grad_out), grads(g),
        ds1(grad_s1), ds0(grad_s0), heads_v(int(p.HV)) {
    if constexpr (requires { Rule::beta_gradient(g); }) dbeta = Rule::beta_gradient(g);
  }

  /// The chunk and value head of a block of the grids (chunks, HV): its batch row, first token,
  /// value head and length.
  struct chunk_position {
    index_t b, t0, hv;
    int n;
  };
  __device__ chunk_position block_chunk() const {
    const span c = chunk_at(blockIdx.x);
    return {c.b, c.start, index_t(blockIdx.y), c.length};
  }

  /// Chunk i of the call: from the table, or chunk i % per_row of batch row i / per_row.
  __device__ span chunk_at(unsigned i) const {
    if (chunks) return chunks[i];
    const int per_row = (this->length + backward_chunk - 1) / backward_chunk;
    const int first = int(i % unsigned(per_row)) * backward_chunk;
    return span{int(i / unsigned(per_row)), first, min(backward_chunk, this->length - first), 0};
  }

  /// Gam_{n-1} [K] of chunk i, value head hv, in `chunk_decay` (per-key decays).
  __device__ float* chunk_decay_at(int i, index_t hv, int K) const { return chunk_decay + (index_t(i) * heads_v + hv) * K; }

  /// `chunk_decay` as a view [1, chunks, HV, K]: chunk i's Gam_{n-1} of value head hv is the
  /// row (0, i, hv, :), which load_rows copies like a token's row.
  __device__ tensor_view<const float, 4> chunk_decay_rows(int K) const {
    return tensor_view<const float, 4>(chunk_decay, {1, index_t(chunk_count), index_t(heads_v), index_t(K)},
                                       {index_t(chunk_count) * heads_v * K, index_t(heads_v) * K, index_t(K), 1});
  }

  /// `states` or `state_grads` as a view [chunks, HV, K, V] (row-major): chunk i's block of
  /// value head hv is (i, hv, :, :).
  template <class E>
  __device__ tensor_view<E, 4> chunk_states(E* base, int K, int V) const {
    return tensor_view<E, 4>(base, {index_t(chunk_count), index_t(heads_v), index_t(K), index_t(V)},
                                 {index_t(heads_v) * K * V, index_t(K) * V, index_t(V), 1});
  }

  /// The [K, V] block of chunk i, value head hv, in `states` or `state_grads` (row-major, K x V).
  template <class E>
  __device__ E* state_at(E* base, int i, index_t hv, int K, int V) const {
    return &chunk_states(base, K, V)(i, hv, 0, 0);
  }
};

}  // namespace linattn::cuda::detail
