// SPDX-License-Identifier: MIT
/// \file
/// Softmax attention, the nonparametric end of test-time regression
/// (docs/math.md#softmax-attention): a Nadaraya-Watson (locally constant) estimate over
/// every earlier pair,
///   o_t = sum_{i<=t} softmax_i(scale q_t^T k_i) v_i.
/// It has no matrix state: the forms are the direct (parallel) softmax, the tiled online
/// softmax (chunkwise; recurrent walks the cache token by token) and decode_step over a
/// `kv_cache` (forms/kv_decode.hpp). options::initial_state / final_state are rejected.
#pragma once

#include "../core/family.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

struct SoftmaxAttention {
  static constexpr const char* name = "SoftmaxAttention";
  using family = softmax_family;
  static constexpr decay_kind decay = decay_kind::none;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;  // [B, T, H, K]
    tensor_view<const T, 4> k;  // [B, T, H, K]
    tensor_view<const T, 4> v;  // [B, T, HV, V]
  };
};

}  // namespace linattn
