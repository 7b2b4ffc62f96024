// SPDX-License-Identifier: MIT
/// \file
/// Runtime sizes to compile-time ones: the head sizes (the kernels are instantiated for K, V in
/// {64, 128}; validation has already rejected other sizes) and the block shapes a plan picks;
/// and the shared memory a block may take, which sizes the typed storages.
#pragma once

#include <type_traits>

#include "../../core/config.hpp"

namespace linattn::cuda::detail {

/// Shared memory a block may use on sm_90 (227 KiB).
inline constexpr int max_block_smem = 227 * 1024;

/// f(std::integral_constant<int, X>{}) for the first X of Xs equal to x, else for the last.
template <int X, int... Xs, class F>
void with_constant(index_t x, F&& f) {
  if constexpr (sizeof...(Xs) == 0) f(std::integral_constant<int, X>{});
  else if (x == X) f(std::integral_constant<int, X>{});
  else with_constant<Xs...>(x, f);
}

template <class F>
void with_dims(index_t K, index_t V, F&& f) {
  with_constant<64, 128>(K, [&](auto k) { with_constant<64, 128>(V, [&](auto v) { f(k, v); }); });
}

}  // namespace linattn::cuda::detail
