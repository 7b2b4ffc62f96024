// SPDX-License-Identifier: MIT
/// \file
/// Hebbian rule (vanilla linear attention), docs/math.md#hebbian:
/// S_t = S_{t-1} + v_t k_t^T, o_t = S_t q_t.
#pragma once

#include "../core/backward.hpp"
#include "../core/family.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

struct Hebbian {
  static constexpr const char* name = "Hebbian";
  using family = additive_family;
  static constexpr decay_kind decay = decay_kind::none;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;  // [B, T, H, K]
    tensor_view<const T, 4> k;  // [B, T, H, K]
    tensor_view<const T, 4> v;  // [B, T, HV, V]
  };

  /// Gradients (backward forms): outputs of the shapes of q, k, v.
  template <class T>
  struct gradients {
    tensor_view<T, 4> dq;  // [B, T, H, K]
    tensor_view<T, 4> dk;  // [B, T, H, K]
    tensor_view<T, 4> dv;  // [B, T, HV, V]
  };
};

}  // namespace linattn
