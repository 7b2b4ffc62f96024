// SPDX-License-Identifier: MIT
/// \file
/// Writes the checkpoints of a call (options::checkpoints `[N, J, HV, K, V]`): the schedulers
/// and the token worker report the state of a (sequence, value head) after each span of
/// tokens, and the states that end a checkpoint interval (or the sequence) are stored.
#pragma once

#include <type_traits>

#include "../../core/options.hpp"
#include "../../core/problem.hpp"
#include "../../core/serving_checks.hpp"
#include "../../core/tensor_view.hpp"
#include "../linalg/eigen_types.hpp"
#include "token_io.hpp"

namespace linattn::cpu {

template <class A>
class checkpoint_writer {
 public:
  checkpoint_writer() = default;
  checkpoint_writer(const options<A>& opt, const detail::problem& p) : view_(opt.checkpoints), every_(p.checkpoint_every) {}

  bool active() const { return every_ > 0; }
  /// Every token's state is a checkpoint and rows have unit stride: the token worker writes
  /// each state straight into its entry (speculative decoding) instead of copying it there.
  bool every_token_rows() const { return every_ == 1 && view_.stride(4) == 1; }
  /// Entry (seq, j, hv): its first element and the stride between its K rows.
  A* entry(index_t seq, index_t j, index_t hv) const { return &view_(seq, j, hv, 0, 0); }
  index_t row_stride() const { return view_.stride(3); }

  /// H ([K, V], any Eigen row-major expression) is the state of sequence seq (of `length`
  /// tokens), value head hv, after `done` of its tokens: stored when that ends an interval.
  template <class H>
  void after(index_t seq, index_t hv, index_t done, index_t length, const H& state) const {
    const index_t j = detail::checkpoint_entry(done, length, every_);
    if (j < 0) return;
    const tensor_view<A, 4> entries(entry(seq, j, 0), {1, view_.extent(2), view_.extent(3), view_.extent(4)},
                                    {0, view_.stride(2), view_.stride(3), view_.stride(4)});  // [1, HV, K, V]
    store_state(entries, 0, hv, state);
  }

 private:
  tensor_view<A, 5> view_{};  // [N, J, HV, K, V]
  index_t every_ = 0;
};

}  // namespace linattn::cpu
