// SPDX-License-Identifier: MIT
/// \file
/// commit_drafts from a compact record (core/draft_record.hpp) on the CPU: the state after
/// the first `a` draft tokens of one (sequence, value head), written over its pool slot in one
/// pass,
///
///   S <- diag(exp(g_0 + ... + g_{a-1})) S + W^T U,   W row i = exp(g_{i+1} + ... + g_{a-1}) k_i,
///
/// with U [a, V] the record's writes. The suffix sums of the log decays run in double.
#pragma once

#include <cmath>

#include "../../core/draft_record.hpp"
#include "../../core/tensor_view.hpp"
#include "../linalg/eigen_types.hpp"
#include "token_io.hpp"

namespace linattn::cpu {

template <class A>
class draft_committer {
 public:
  /// Slot `slot` of `pool` (`[P, HV, K, V]`), value head hv <- the state after the first a
  /// (>= 1) draft tokens of sequence seq of the record.
  void commit(const tensor_view<A, 4>& pool, index_t slot, index_t hv, const draft_record<A>& rec, index_t seq,
              index_t a) {
    const index_t K = pool.extent(2), V = pool.extent(3), G = rec.log_decay.extent(3);
    const index_t width = G == 1 ? 1 : K;  // one decay for all key rows, or one per row
    W_.resize(a, K), U_.resize(a, V), s_.setZero(width);
    for (index_t i = a - 1; i >= 0; --i) {  // s = g_{i+1} + ... + g_{a-1}, then + g_i
      weights();
      for (index_t d = 0; d < K; ++d) W_(i, d) = e_(width == 1 ? 0 : d) * rec.keys(seq, i, hv, d);
      for (index_t d = 0; d < V; ++d) U_(i, d) = rec.updates(seq, i, hv, d);
      for (index_t d = 0; d < width; ++d) s_(d) += static_cast<double>(rec.log_decay(seq, i, hv, d));
    }
    weights();
    decay_ = width == 1 ? col_vec<A>::Constant(K, e_(0)) : e_;  // [K] the slot's decay over all a tokens
    if (pool.stride(3) == 1) {
      Eigen::Map<mat<A>, Eigen::Unaligned, Eigen::OuterStride<>> S(&pool(slot, hv, 0, 0), K, V,
                                                                   Eigen::OuterStride<>(pool.stride(2)));
      update(S);
    } else {
      H_.resize(K, V);
      load_state(pool, slot, hv, H_);
      update(H_);
      store_state(pool, slot, hv, H_);
    }
  }

 private:
  /// e_ = exp(s_) (vectorised, in A).
  void weights() { e_ = s_.template cast<A>().array().exp().matrix(); }

  /// H <- diag(decay) H + W^T U, row by row: one pass over the state.
  template <class S>
  void update(S&& H) {
    const index_t a = W_.rows();
    for (index_t i = 0; i < H.rows(); ++i) {
      auto row = H.row(i);
      row *= decay_(i);
      for (index_t m = 0; m < a; ++m) row.noalias() += W_(m, i) * U_.row(m);
    }
  }

  mat<A> W_, U_, H_;         // [a, K] weighted keys, [a, V] writes, [K, V] a strided slot's copy
  col_vec<double> s_;        // [K or 1] suffix sums of the log decays
  col_vec<A> e_, decay_;     // [K or 1] exp(s_); [K] the slot's decay
};

}  // namespace linattn::cpu
