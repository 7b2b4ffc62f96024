// SPDX-License-Identifier: MIT
/// \file
/// The plan of a chunkwise backward call: the sequence and chunk tables (chunks of
/// backward_chunk tokens), the grids of its four passes and the typed layout of its workspace,
/// built on the host before anything is queued.
///
/// Workspace: two states per chunk and value head (the chunk-start state and the gradient of
/// the chunk-end state, 2 K V elements of `State` per backward_chunk tokens and value head:
/// workspace_state_t, bf16 for bf16 inputs with scalar or no gates, else fp32), and for the
/// delta family four rows per token and value head (W, Wb: 2 K of `Row`, workspace_row_t,
/// bf16 for bf16 inputs, else fp32; U and dYl, over which the state passes write the hand-over
/// U~ and dY to pass 4: 2 V of `State`, workspace_hand_over_t; beta: one float); per-key
/// decays add two more (the dq and dk of each value head, 2 K floats, which first hold the
/// state passes' decayed key and query rows as `Row`), a third for the delta family (-K ⊙ Gam,
/// K of `Row`), and K floats per chunk and value head (the chunk's end decay).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "../../core/problem.hpp"
#include "../kernels/backward/backward_args.cuh"
#include "../kernels/backward/chunk_states.cuh"
#include "../kernels/backward/state_passes_mma.cuh"
#include "plan.cuh"
#include "workspace_pool.cuh"

namespace linattn::cuda::detail {

template <class State, class Row>
struct backward_plan : chunk_tables {  // chunks of backward_chunk tokens
  dim3 chunk_grid;                 // (chunks, HV)   pass 1
  int state_columns = 0;           // value columns per block of passes 2 and 3 (16, 32 or 64; with
                                   // register_states 16 per group)
  int state_groups = 0;            // groups of 16 columns per block of the register-resident passes
  dim3 state_grid;                 // (V / state_columns, HV, 2 N)   passes 2 and 3, side by side
  dim3 gradient_grid;              // (chunks, H)    pass 4 (per-key decays: chunk_grid)
  index_t qk_rows = 0;             // B T H: the rows of dq (and dk) the group sum writes (per-key decays)
  dim3 group_sum_grid;             // blocks of 256 threads over their pieces of 8, at most 65535 (a grid-stride loop)
  struct {
    workspace_span<span> seqs;                   // [N]
    workspace_span<span> chunks;                 // [chunks]
    workspace_span<State> states, state_grads;   // [chunks, HV, K, V] each
    workspace_span<Row> w_fwd, w_bwd;            // [B, T, HV, K]  (delta family)
    workspace_span<State> u_rows, dy_rows;       // [B, T, HV, V]  (delta family)
    workspace_span<float> betas;                 // [B, T, HV]     (delta family)
    workspace_span<float> dq_parts, dk_parts;    // [B, T, HV, K]  (per-key decays; first keys_end, queries_start)
    workspace_span<Row> keys_start;              // [B, T, HV, K]  (per-key delta family)
    workspace_span<float> chunk_decay;           // [chunks, HV, K]  (per-key decays)
    std::size_t bytes = 0;
  } workspace;

  /// `register_states`: passes 2 and 3 run as state_passes_mma.cuh (register_state_passes);
  /// else as chunk_state_passes.cuh, which holds `residency[i]` blocks per multiprocessor at
  /// state_pass_widths[i] value columns.
  backward_plan(const problem& p, bool corrects, bool per_key, bool register_states, index_t multiprocessors,
                const std::array<int, 3>& residency)
      : chunk_tables(p, backward_chunk) {
    if (register_states) {
      state_groups = backward_state_groups(p.N * p.HV, p.V, multiprocessors);
      state_columns = 16 * state_groups;
    } else {
      state_columns = backward_state_columns(p.N * p.HV, p.V, multiprocessors, residency);
    }
    chunk_grid = dim3(unsigned(n_chunks), unsigned(p.HV));
    state_grid = dim3(unsigned(p.V / state_columns), unsigned(p.HV), unsigned(2 * p.N));
    gradient_grid = dim3(unsigned(n_chunks), unsigned(p.H));
    qk_rows = p.B * p.T * p.H;
    group_sum_grid = dim3(unsigned(std::min<index_t>((qk_rows * (p.K / 8) + 255) / 256, 65535)));
    const std::size_t tokens = corrects ? std::size_t(p.B * p.T * p.HV) : 0;
    const std::size_t state = n_chunks * std::size_t(p.HV * p.K * p.V);
    workspace_layout ws;
    workspace.seqs = ws.take<span>(seqs.size());
    workspace.chunks = ws.take<span>(chunks.size());
    workspace.states = ws.take<State>(state);
    workspace.state_grads = ws.take<State>(state);
    workspace.w_fwd = ws.take<Row>(tokens * std::size_t(p.K));
    workspace.w_bwd = ws.take<Row>(tokens * std::size_t(p.K));
    workspace.u_rows = ws.take<State>(tokens * std::size_t(p.V));
    workspace.dy_rows = ws.take<State>(tokens * std::size_t(p.V));
    workspace.betas = ws.take<float>(tokens);
    const std::size_t parts = per_key ? std::size_t(p.B * p.T * p.HV * p.K) : 0;
    workspace.dq_parts = ws.take<float>(parts);
    workspace.dk_parts = ws.take<float>(parts);
    workspace.keys_start = ws.take<Row>(per_key && corrects ? parts : 0);
    workspace.chunk_decay = ws.take<float>(per_key ? n_chunks * std::size_t(p.HV * p.K) : 0);
    workspace.bytes = ws.bytes;
  }

  /// Points the kernel arguments at the workspace `ws` and uploads the tables (stream-ordered).
  template <class Rule, class E>
  void bind(backward_args<Rule, E>& args, const scratch& ws, const problem& p, cudaStream_t stream) const {
    static_assert(std::is_same_v<State, typename backward_args<Rule, E>::state_type> &&
                      std::is_same_v<State, typename backward_args<Rule, E>::hand_over_type> &&
                      std::is_same_v<Row, typename backward_args<Rule, E>::row_type>,
                  "the plan of this call's workspace types");
    args.seqs = upload(ws, workspace.seqs, seqs, stream);
    args.chunks = upload(ws, workspace.chunks, chunks, stream);
    args.chunk_count = int(n_chunks);
    args.states = ws.at(workspace.states);
    args.state_grads = ws.at(workspace.state_grads);
    if (workspace.w_fwd.count) {
      args.w_fwd = view(ws.at(workspace.w_fwd), p.B, p.T, p.HV, p.K);
      args.w_bwd = view(ws.at(workspace.w_bwd), p.B, p.T, p.HV, p.K);
      args.u_rows = view(ws.at(workspace.u_rows), p.B, p.T, p.HV, p.V);
      args.dy_rows = view(ws.at(workspace.dy_rows), p.B, p.T, p.HV, p.V);
    }
    if (workspace.betas.count) args.betas = view(ws.at(workspace.betas), p.B, p.T, p.HV);
    if (workspace.dq_parts.count) {
      args.dq_parts = view(ws.at(workspace.dq_parts), p.B, p.T, p.HV, p.K);
      args.dk_parts = view(ws.at(workspace.dk_parts), p.B, p.T, p.HV, p.K);
      const auto rows_in = [&](workspace_span<float> parts) {  // the decayed rows, before pass 4 writes the parts
        return view(ws.at(workspace_span<Row>{parts.offset, parts.count}), p.B, p.T, p.HV, p.K);
      };
      args.keys_end = rows_in(workspace.dq_parts), args.queries_start = rows_in(workspace.dk_parts);
      args.chunk_decay = ws.at(workspace.chunk_decay);
    }
    if (workspace.keys_start.count) args.keys_start = view(ws.at(workspace.keys_start), p.B, p.T, p.HV, p.K);
  }
};

}  // namespace linattn::cuda::detail
