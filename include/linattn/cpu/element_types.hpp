// SPDX-License-Identifier: MIT
/// \file
/// The element types the CPU forms take: float and double (each its own state and
/// accumulation type), and the 16-bit Eigen::bfloat16 and Eigen::half (float state and
/// accumulation; rows are converted to float as they are loaded and rounded once when outputs
/// are stored). Any other type stops with one line saying what is supported.
#pragma once

#include <type_traits>

#include "../core/family.hpp"
#include "linalg/eigen_types.hpp"

namespace linattn {

template <>
struct state_type<Eigen::bfloat16> {
  using type = float;
};
template <>
struct state_type<Eigen::half> {
  using type = float;
};

namespace cpu {

template <class T>
inline constexpr bool is_input_element = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                         std::is_same_v<T, Eigen::bfloat16> || std::is_same_v<T, Eigen::half>;

/// True for a supported element type; a static_assert naming the supported ones otherwise.
template <class T>
constexpr bool check_element() {
  static_assert(is_input_element<T>, "linattn: CPU inputs are float, double, Eigen::bfloat16 or Eigen::half");
  return is_input_element<T>;
}

}  // namespace cpu
}  // namespace linattn
