// SPDX-License-Identifier: MIT
/// \file
/// What the schedulers (schedulers.hpp) ask of a worker. A worker owns the workspace of one
/// thread slot and runs one (sequence, value head) task at a time:
///
///   block worker   W(capacity, K, V)                      workspace for up to `capacity` tokens
///                  load(in, b, t0, n, hq, hv, scale)      the block's state-free work
///                  emit(H, out, b, t0, hv)                its outputs from the state H at its start
///                  advance(H)                             H <- the state after the block
///   token worker   W(K, V); run(in, out, s_in, s_out, slot, seq, b, t0, n, hq, hv, scale, cp)
///
/// A block worker whose `load` never reads the state (`chunk_local_load`) lets the chunks of
/// one sequence load on other threads while its state pass runs.
#pragma once

#include <concepts>

#include "../../core/config.hpp"
#include "../../core/tensor_view.hpp"
#include "../linalg/eigen_types.hpp"

namespace linattn::cpu {

template <class W>
concept block_worker =
    requires { typename W::inputs_t; typename W::scalar; typename W::state_scalar; } &&
    std::constructible_from<W, index_t, index_t, index_t> &&
    requires(W w, const typename W::inputs_t& in, const tensor_view<typename W::scalar, 4>& out,
             mat<typename W::state_scalar>& H, index_t i, typename W::state_scalar scale) {
      w.load(in, i, i, i, i, i, scale);
      w.emit(H, out, i, i, i);
      w.advance(H);
    };

template <class W>
concept chunk_local_worker = block_worker<W> && requires { requires W::chunk_local_load; };

}  // namespace linattn::cpu
