// SPDX-License-Identifier: MIT
/// \file
/// The two passes every backward worker makes over one (sequence, value head) in chunks of C
/// tokens (the last may be shorter):
///
///   pass 1  from options::initial_state, keeps the state at the start of every chunk and
///           calls forward(H, c0, n) to advance H ([K, V]) over tokens [c0, c0 + n);
///   pass 2  from options::grad_final_state, the chunks in reverse: backward(H0, c0, n) with H0
///           the chunk's start state and dH the gradient of its end state, which it leaves
///           holding the gradient of H0; dH then goes to options::grad_initial_state.
///
/// `Streamed`: the start states are written with non-temporal stores (stream_block), for
/// workers that keep more per chunk than they can hold in cache; otherwise they are copied.
#pragma once

#include <algorithm>
#include <vector>

#include "../../../core/backward.hpp"
#include "../../io/token_io.hpp"
#include "../../linalg/eigen_types.hpp"
#include "gradient_io.hpp"

namespace linattn::cpu {

template <bool Streamed, class A, class Forward, class Backward>
void chunk_passes(const backward_options<A>& opt, index_t seq, index_t hv, index_t len, index_t C,
                  std::vector<mat<A>>& starts, mat<A>& H, mat<A>& dH, Forward&& forward, Backward&& backward) {
  const index_t chunks = (len + C - 1) / C;
  if (starts.size() < static_cast<std::size_t>(chunks))
    starts.resize(static_cast<std::size_t>(chunks), mat<A>(H.rows(), H.cols()));
  load_state(opt.initial_state, seq, hv, H);
  for (index_t c = 0; c < chunks; ++c) {
    const index_t c0 = c * C;
    if constexpr (Streamed) stream_block(starts[std::size_t(c)], H);
    else starts[std::size_t(c)] = H;
    forward(H, c0, std::min(C, len - c0));
  }
  if constexpr (Streamed) stream_fence();
  load_state(opt.grad_final_state, seq, hv, dH);
  for (index_t c = chunks - 1; c >= 0; --c) {
    const index_t c0 = c * C;
    backward(starts[std::size_t(c)], c0, std::min(C, len - c0));
  }
  store_state(opt.grad_initial_state, seq, hv, dH);
  stream_fence();  // the gradient rows' non-temporal stores (gradient_io.hpp)
}

}  // namespace linattn::cpu
