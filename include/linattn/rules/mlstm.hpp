// SPDX-License-Identifier: MIT
/// \file
/// mLSTM, the matrix-memory cell of xLSTM (Beck et al. 2024), docs/math.md#mlstm. With the
/// forget gate f_t = sigmoid(f~_t) and the exponential input gate exp(i~_t):
///
///   C_t = f_t C_{t-1} + exp(i~_t) v_t k_t^T,    n_t = f_t n_{t-1} + exp(i~_t) k_t
///   h_t = C_t q_t / max(|n_t^T q_t|, 1)
///
/// computed in the stabilised form (m_t = max(log f_t + m_{t-1}, i~_t), C~ = exp(-m) C,
/// n~ = exp(-m) n), so that no exponential overflows. State `[N, HV, K, V + 2]`: columns
/// [0, V) hold C~^T, column V holds n~ and column V + 1 the stabiliser m (in every row).
#pragma once

#include "../core/family.hpp"
#include "../core/coefficient_view.hpp"
#include "../core/tensor_view.hpp"

namespace linattn {

struct mLSTM {
  static constexpr const char* name = "mLSTM";
  using family = mlstm_family;

  template <class T>
  struct inputs {
    tensor_view<const T, 4> q;  // [B, T, H, K]
    tensor_view<const T, 4> k;  // [B, T, H, K]
    tensor_view<const T, 4> v;  // [B, T, HV, V]
    coefficient_view<T, 3> i;  // [B, T, HV] input gate pre-activation i~ (the gate is exp(i~))
    coefficient_view<T, 3> f;  // [B, T, HV] forget gate pre-activation f~ (the gate is sigmoid(f~))
  };

  static constexpr const char* state_shape = "[N, HV, K, V + 2]";
  /// C~^T, n~ and m side by side (see the file comment).
  static constexpr index_t state_columns(index_t /*K*/, index_t V) { return V + 2; }

  template <class T, class Check>
  static void check_inputs(const inputs<T>& in, Check& c) {
    c.per_token("i", in.i, value_range::any);
    c.per_token("f", in.f, value_range::any);
  }
};

}  // namespace linattn
