// SPDX-License-Identifier: MIT
/// \file
/// What every CUDA kernel of a call needs: the caller's views, the sequences, the resolved
/// scale and head grouping. The chunkwise kernels add their workspace to it (chunk_args.cuh).
/// Sequences and chunks are `span`s of tables the host builds (host/plan.cuh).
#pragma once

#include <cstdint>

#include "../../core/options.hpp"
#include "../../core/problem.hpp"
#include "../../core/tensor_view.hpp"

namespace linattn::cuda::detail {

/// Chunk length of the CUDA chunkwise form.
inline constexpr int chunk = 64;

/// One sequence, or one chunk of a sequence: batch row, first token, length, and for a
/// sequence the index of its first chunk in the call's chunk table (0 for a chunk).
struct span {
  int b, start, length, first_chunk;
};

/// The pool slots of a call with few sequences, carried in the kernel arguments: no workspace,
/// no upload, so a small decode through a pool costs what one on a contiguous state does.
struct inline_slots {
  static constexpr int capacity = 64;
  int count = 0;                    // 0: not used (no pool, or the plan uploaded a table)
  std::int32_t values[capacity]{};  // [count] pool slots (negative: none)

  /// values[n]. A select over every entry: an index computed at run time into the parameter
  /// space would make the compiler copy the arguments to local memory first.
  __device__ index_t at(index_t n) const {
    std::int32_t s = 0;
#pragma unroll
    for (int i = 0; i < capacity; ++i) s = i == n ? values[i] : s;
    return index_t(s);
  }
};

template <class Rule, class T>
struct call_args {
  typename Rule::template inputs<T> in;
  tensor_view<T, 4> out;           // [B, T, HV, V]
  tensor_view<const float, 4> s0;  // [N, HV, K, V] or not given
  tensor_view<float, 4> s1;        // [N, HV, K, V] or not given (may alias s0)
  const span* seqs = nullptr;      // [N], or null: sequence n is batch row n, all `length` tokens
  const std::int64_t* slots = nullptr;  // [N] pool slots (the plan's copy of options::state_indices), or null
  inline_slots few_slots{};             // the pool slots themselves when the plan carries them inline
  tensor_view<float, 5> checkpoints{};  // [N, J, HV, K, V] (options::checkpoints), or not given
  int every = 0;                        // checkpoint interval in tokens (0: none)
  int length = 0;                  // T
  int group = 1;                   // HV / H
  float scale = 1.0f;

  call_args() = default;
  call_args(const typename Rule::template inputs<T>& inputs, const tensor_view<T, 4>& output,
            const tensor_view<const float, 4>& state_in, const tensor_view<float, 4>& state_out,
            const linattn::detail::problem& p)
      : in(inputs), out(output), s0(state_in), s1(state_out), length(int(p.T)), group(int(p.group)),
        scale(float(p.scale)) {}

  /// The state slot of sequence n: n itself, or its pool slot (negative: none).
  __device__ index_t slot(index_t n) const {
    if (few_slots.count > 0) return few_slots.at(n);
    return slots ? index_t(slots[n]) : n;
  }

  /// The checkpoint entry that takes the state once `done` of a sequence's `length` tokens are
  /// in (after every `every` tokens and after the last one), or -1 for none.
  __device__ int checkpoint_entry(int done, int length) const {
    return every > 0 && done > 0 && (done % every == 0 || done == length) ? (done - 1) / every : -1;
  }

  /// Sequence n: from the table, or batch row n; its first chunk counted in chunks of Len.
  template <int Len = chunk>
  __device__ span sequence(index_t n) const {
    return seqs ? seqs[n] : span{int(n), 0, length, int(n) * ((length + Len - 1) / Len)};
  }
};

}  // namespace linattn::cuda::detail
