// SPDX-License-Identifier: MIT
/// \file
/// Eigen matrix types used by the CPU backend. All workspaces are row-major: a row is a token.
#pragma once

#include <Eigen/Core>

namespace linattn::cpu {

template <class A>
using mat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class A>
using row_vec = Eigen::Matrix<A, 1, Eigen::Dynamic>;
template <class A>
using col_vec = Eigen::Matrix<A, Eigen::Dynamic, 1>;

}  // namespace linattn::cpu
