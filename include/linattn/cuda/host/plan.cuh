// SPDX-License-Identifier: MIT
/// \file
/// The plan of a call, built once on the host before anything is queued: the sequence and
/// chunk tables of a packed batch, which kernels run on which grids, and the typed layout of
/// the call's workspace. The entry points validate (call_setup.cuh), build the plan, take the
/// workspace it asks for, bind the kernel arguments to it and launch from it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../../core/options.hpp"
#include "../../core/problem.hpp"
#include "../../core/tensor_view.hpp"
#include "../kernels/chunk_args.cuh"
#include "../kernels/chunk_start_states.cuh"
#include "../kernels/token_recurrence.cuh"
#include "../tile/load_store.cuh"
#include "status.cuh"
#include "workspace_pool.cuh"

namespace linattn::cuda::detail {

using linattn::detail::problem;

/// Sequence n of a validated problem (batch rows, or the packed segments of cu_seqlens), its
/// first chunk counted in chunks of `len` tokens.
inline std::vector<span> sequence_table(const problem& p, int len = chunk) {
  std::vector<span> out;
  int first = 0;
  for (index_t n = 0; n < p.N; ++n) {
    out.push_back({int(p.batch(n)), int(p.start(n)), int(p.length(n)), first});
    first += int((p.length(n) + len - 1) / len);
  }
  return out;
}

/// The validated pool slot of every sequence (options::state_indices), so the kernels never
/// read the caller's list: none without a pool; in the kernel arguments (`few`) when they fit
/// there; else a table uploaded with the plan's other tables.
struct slot_plan {
  std::vector<std::int64_t> table;  // [N] to upload, or empty
  inline_slots few;                 // count > 0: carried inline instead

  explicit slot_plan(const problem& p) {
    if (!p.slots.given() || p.N == 0) return;
    bool fits = p.N <= inline_slots::capacity;
    for (index_t n = 0; n < p.N && fits; ++n) fits = p.slot(n) >= INT32_MIN && p.slot(n) <= INT32_MAX;
    if (fits) {
      few.count = int(p.N);
      for (index_t n = 0; n < p.N; ++n) few.values[n] = std::int32_t(p.slot(n));
      return;
    }
    for (index_t n = 0; n < p.N; ++n) table.push_back(std::int64_t(p.slot(n)));
  }

  /// Points the kernel arguments at the slots (the table's span of the workspace `ws`).
  template <class Args>
  void bind(Args& args, const scratch& ws, workspace_span<std::int64_t> at, cudaStream_t stream) const {
    args.few_slots = few;
    args.slots = upload(ws, at, table, stream);
  }
};

/// The tables of a call in chunks of `len` tokens: its sequences and every chunk of every
/// sequence (empty sequences have none), host tables of a packed batch (empty otherwise), and
/// the call's chunk count.
struct chunk_tables {
  std::vector<span> seqs, chunks;  // host tables of a packed batch (empty otherwise)
  std::size_t n_chunks = 0;        // chunks of the call

  chunk_tables(const problem& p, int len) {
    if (p.cu.given()) {
      seqs = sequence_table(p, len);
      for (const span& s : seqs)
        for (int t = s.start; t < s.start + s.length; t += len)
          chunks.push_back({s.b, t, s.length - (t - s.start) < len ? s.length - (t - s.start) : len, 0});
    }
    n_chunks = p.cu.given() ? chunks.size() : std::size_t(p.B * ((p.T + len - 1) / len));
  }
};

/// Multiprocessors of the current device.
inline int multiprocessors() {
  int device = 0, count = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  return count;
}

/// The state pass of a chunkwise call (kernels/chunk_state_*.cuh), chosen per call from the
/// input type and the shape (chunkwise_kernels<E>::state_pass_for, chunkwise.cuh).
enum class state_pass {
  wmma_16, wmma_32,               // fp32: H in shared memory, 3xTF32 WMMA; 16 or 32 value columns per block
  mma_split,                      // 16-bit: H in registers, output in the same warps; 4 groups of 2 warps
  mma_wide,                       //   ... or one-warp groups over all value columns
  specialized_16, specialized_32, // 16-bit, few sequences x heads: state and output warps; 16 or 32 columns
  start_states_16, start_states_32, start_states_64  // 16-bit additive rules, K = V = 64 or 128, few sequences x
                                     // heads: the chunk-start states alone ([64, 16], [64, 32] or [64, 64] blocks
                                     // of the state), then the outputs of every chunk in parallel
};

/// Whether state pass `s` is the state-only pass of the two-pass forward (chunk_start_states.cuh).
constexpr bool two_pass(state_pass s) {
  return s == state_pass::start_states_16 || s == state_pass::start_states_32 || s == state_pass::start_states_64;
}

/// Value columns per block of a state pass (its kernel's BV).
constexpr index_t state_columns(state_pass s, index_t V) {
  switch (s) {
    case state_pass::wmma_16:
    case state_pass::specialized_16:
    case state_pass::start_states_16: return 16;
    case state_pass::wmma_32:
    case state_pass::specialized_32:
    case state_pass::start_states_32: return 32;
    case state_pass::start_states_64:
    case state_pass::mma_split: return 64;
    default: return V;
  }
}

/// What runs before the state pass of a chunkwise call: the chunk-local pass (W, U, the scores,
/// b), or where the scores are formed later (the fused state pass, kernels/chunk_state_mma.cuh;
/// the two-pass forward's output pass, kernels/chunk_output_mma.cuh) only the gate cumsums b
/// (scalar decay; kernels/chunk_gate_cumsum.cuh) or nothing (no decay).
enum class first_pass { chunk_local, gate_cumsum, none };

/// The plan of a chunkwise call with inputs of type E.
template <class E>
struct chunkwise_plan : chunk_tables {
  slot_plan slots;                 // pool slots (options::state_indices)
  state_pass state;
  product_precision products;      // fp32 inputs: 3xTF32 or TF32 block products (options::precision)
  bool per_key;                    // per-key decays: the chunk-local pass writes the state pass's Q and K rows
                                   // and exp(b_C) per key (kernels/state_pass_decays.cuh)
  // For the warp-specialised state pass, W, the scores and copies of K and Q are head-major
  // with padded rows: a chunk's rows of one value head are one block, laid out as that pass's
  // shared tiles, which it copies whole (tile/bulk_copy.cuh).
  bool whole_tiles;
  first_pass first;               // without the chunk-local pass: no W, U, scores; b only for gate_cumsum
  index_t ldw, lds;              // workspace row lengths of W, K, Q and of the scores
  index_t decay_slots;           // decays per chunk and value head: C (b) or K (per_key)
  dim3 local_grid, state_grid;   // (chunks, HV) and (V / state_columns, HV, N); two-pass: x times K / start_state_rows
  dim3 output_grid;              // two-pass forward: (chunks, HV, 1), one block for all V columns
  struct {
    workspace_span<span> seqs;          // [N]
    workspace_span<span> chunks;        // [chunks]
    workspace_span<std::int64_t> slots; // [N]
    workspace_span<E> w;                // [B, T, HV, K]  W = T diag(exp b) K
    workspace_span<E> u;                // [B, T, HV, V]  U = T V
    workspace_span<E> scores;           // [B, T, HV, C]  scale (Q K^T ⊙ Gam), causal
    workspace_span<E> keys, queries;    // [B, T, HV, K]  the state pass's K and Q rows (whole_tiles or per_key)
    workspace_span<E> states;           // [chunks, HV, K, V]  two-pass forward: each chunk's start state
    workspace_span<float> gate_cumsum;  // [chunks, HV, decay_slots]  b, or exp(b_C) per key
    std::size_t bytes = 0;
  } workspace;  // W, scores, K, Q stored [B, HV, T, ldw or lds] with whole_tiles, else as shown

  chunkwise_plan(const problem& p, state_pass s, product_precision products = product_precision::exact,
                 bool per_key = false, first_pass first = first_pass::chunk_local)
      : chunk_tables(p, chunk), slots(p), state(s), products(products), per_key(per_key),
        whole_tiles(s == state_pass::specialized_16 || s == state_pass::specialized_32),
        first(first) {
    ldw = p.K + (whole_tiles ? pad<E> : 0);
    lds = chunk + (whole_tiles ? pad<E> : 0);
    decay_slots = per_key ? p.K : index_t(chunk);
    local_grid = dim3(unsigned(n_chunks), unsigned(p.HV));
    const index_t key_blocks = two_pass(s) ? p.K / start_state_rows(p.K) : 1;
    state_grid = dim3(unsigned(p.V / state_columns(s, p.V) * key_blocks), unsigned(p.HV), unsigned(p.N));
    output_grid = dim3(unsigned(n_chunks), unsigned(p.HV), 1);
    const bool local = first == first_pass::chunk_local;
    const std::size_t tokens = local ? std::size_t(p.B * p.T * p.HV) : 0;  // rows of pass 1's outputs
    workspace_layout ws;
    workspace.seqs = ws.take<span>(seqs.size());
    workspace.chunks = ws.take<span>(chunks.size());
    workspace.slots = ws.take<std::int64_t>(slots.table.size());
    workspace.w = ws.take<E>(tokens * ldw);
    workspace.u = ws.take<E>(tokens * p.V);
    workspace.scores = ws.take<E>(tokens * lds);
    if (whole_tiles || per_key) {
      workspace.keys = ws.take<E>(tokens * ldw);
      workspace.queries = ws.take<E>(tokens * ldw);
    }
    workspace.states = ws.take<E>(two_pass(s) ? n_chunks * std::size_t(p.HV * p.K * p.V) : 0);
    workspace.gate_cumsum = ws.take<float>(first != first_pass::none ? n_chunks * p.HV * decay_slots : 0);
    workspace.bytes = ws.bytes;
  }

  /// Points the kernel arguments at the workspace `ws` and uploads the tables (stream-ordered).
  template <class Rule>
  void bind(chunk_args<Rule, E>& args, const scratch& ws, const problem& p, cudaStream_t stream) const {
    const auto rows = [&](workspace_span<E> at, index_t width, index_t ld) {
      if (!whole_tiles) return view(ws.at(at), p.B, p.T, p.HV, width);
      return tensor_view<E, 4>(ws.at(at), {p.B, p.T, p.HV, width}, {p.HV * p.T * ld, ld, p.T * ld, 1});
    };
    args.seqs = upload(ws, workspace.seqs, seqs, stream);
    args.chunks = upload(ws, workspace.chunks, chunks, stream);
    slots.bind(args, ws, workspace.slots, stream);
    args.w = rows(workspace.w, p.K, ldw);
    args.u = view(ws.at(workspace.u), p.B, p.T, p.HV, p.V);
    args.scores = rows(workspace.scores, index_t(chunk), lds);
    if (whole_tiles || per_key) {
      args.keys = rows(workspace.keys, p.K, ldw);
      args.queries = rows(workspace.queries, p.K, ldw);
    }
    if (two_pass(state))
      args.states = tensor_view<E, 4>(ws.at(workspace.states), {index_t(n_chunks), p.K, p.HV, p.V},
                                      {p.HV * p.K * p.V, p.V, p.K * p.V, 1});
    args.gate_cumsum = view(ws.at(workspace.gate_cumsum), index_t(n_chunks), p.HV, decay_slots);
  }
};

/// The plan of a recurrent or decode call: the sequence table of a packed batch and the token
/// kernel's grid, one block per (sequence, value head, 32 value columns).
struct token_plan {
  std::vector<span> seqs;           // host table of a packed batch (empty otherwise)
  slot_plan slots;                  // pool slots (options::state_indices)
  dim3 grid;                        // (N, HV, V / 32), or (N HV V / 32) with the slabs of a head adjacent
  int warps;                        // per block: 8 when the grid leaves most multiprocessors idle, else 4
  bool slabs_adjacent = false;      // the one-dimensional grid (token_block_of)
  struct {
    workspace_span<span> seqs;           // [N]
    workspace_span<std::int64_t> slots;  // [N]
    std::size_t bytes = 0;
  } workspace;

  token_plan(const problem& p, index_t sms, bool per_key)
      : slots(p), grid(unsigned(p.N), unsigned(p.HV), unsigned(p.V / 32)) {
    const index_t blocks = p.N * p.HV * (p.V / 32);
    const index_t wave4 = sms * token_blocks_per_multiprocessor(4), wave8 = sms * token_blocks_per_multiprocessor(8);
    // 8 warps a block below one block per multiprocessor; for per-key decays (more work per
    // row of the state) also while the whole grid fits one wave of 8-warp blocks (4 per
    // multiprocessor, token_kernel's bound): KDA decode (H = 16, K = V = 128) on an H100 at
    // B = 8, 1.55 -> 1.48x the state's memory floor. Past one wave they lose (two waves where 4
    // warps take one: 1.32 -> 1.43x at B = 16).
    warps = blocks < sms || (per_key && blocks <= wave8) ? 8 : 4;
    // A grid of a full wave of 4-warp blocks and more (8 per multiprocessor) streams its
    // states best with the slabs of a head adjacent: GatedDelta decode at B = 256 on an H200,
    // 164 -> 141 us; in a decode loop on an H100, 1.26 -> 1.23-1.24x the floor at B = 32 and
    // 1.20 -> 1.13-1.14x at B = 64, level at B = 16, and 1.45 -> 1.47x at B = 8 (half a wave:
    // not taken there); KDA 1.31 -> 1.27x at B = 32, 1.25 -> 1.16x at B = 64 and 1.24 -> 1.10x
    // at B = 256.
    if (warps == 4 && blocks >= wave4 && blocks <= index_t(INT32_MAX)) {
      slabs_adjacent = true;
      grid = dim3(unsigned(blocks));
    }
    if (p.cu.given()) seqs = sequence_table(p);
    workspace_layout ws;
    workspace.seqs = ws.take<span>(seqs.size());
    workspace.slots = ws.take<std::int64_t>(slots.table.size());
    workspace.bytes = ws.bytes;
  }

  template <class Rule, class E>
  void bind(call_args<Rule, E>& args, const scratch& ws, cudaStream_t stream) const {
    args.seqs = upload(ws, workspace.seqs, seqs, stream);
    slots.bind(args, ws, workspace.slots, stream);
  }
};

}  // namespace linattn::cuda::detail
