// SPDX-License-Identifier: MIT
/// \file
/// The sequences of a call and their chunks, as small tables the kernels index by block.
#pragma once

#include <vector>

#include "../../core/problem.hpp"

namespace linattn::cuda::detail {

/// Chunk length of the CUDA chunkwise form.
inline constexpr int chunk = 64;

/// One sequence, or one chunk of a sequence: batch row, first token, length, and for a
/// sequence the index of its first chunk in the call's chunk table (0 for a chunk).
struct span {
  int b, start, length, first_chunk;
};

/// Sequence n of a validated problem (batch rows, or the packed segments of cu_seqlens).
inline std::vector<span> sequences(const linattn::detail::problem& p) {
  std::vector<span> out;
  int first = 0;
  for (index_t n = 0; n < p.N; ++n) {
    out.push_back({int(p.batch(n)), int(p.start(n)), int(p.length(n)), first});
    first += int((p.length(n) + chunk - 1) / chunk);
  }
  return out;
}

/// Every chunk of every sequence (empty sequences have none).
inline std::vector<span> chunks(const std::vector<span>& seqs) {
  std::vector<span> out;
  for (const span& s : seqs)
    for (int t = s.start; t < s.start + s.length; t += chunk)
      out.push_back({s.b, t, s.length - (t - s.start) < chunk ? s.length - (t - s.start) : chunk, 0});
  return out;
}


}  // namespace linattn::cuda::detail
