// SPDX-License-Identifier: MIT
/// \file
/// Runtime head sizes to compile-time ones: the kernels are instantiated for K, V in {64, 128}
/// (validation has already rejected other sizes).
#pragma once

#include <type_traits>

#include "../../core/config.hpp"

namespace linattn::cuda::detail {

template <class F>
void with_dims(index_t K, index_t V, F&& f) {
  using k64 = std::integral_constant<int, 64>;
  using k128 = std::integral_constant<int, 128>;
  if (K == 64 && V == 64) f(k64{}, k64{});
  else if (K == 64) f(k64{}, k128{});
  else if (V == 64) f(k128{}, k64{});
  else f(k128{}, k128{});
}

}  // namespace linattn::cuda::detail
