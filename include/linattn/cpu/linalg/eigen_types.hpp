// SPDX-License-Identifier: MIT
/// \file
/// Eigen matrix types used by the CPU backend. All workspaces are row-major: a row is a token.
///
/// This is the one place the CPU backend includes Eigen (and the x86 intrinsics). GCC before 13
/// warns (-Wmaybe-uninitialized, -Wuninitialized) about the `_mm512_undefined_*` idiom of its
/// own intrinsics headers wherever Eigen's AVX-512 kernels are inlined into a caller (GCC bug
/// 105593): over a hundred warnings for one rule at -O2 -march=native. The warnings are placed
/// at the intrinsics' source lines, so ignoring them while those headers are read silences them
/// in every caller (when <linattn/linattn.hpp> is the first to include them in a translation
/// unit), and no other warning is touched.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <Eigen/Cholesky>
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic pop
#endif

namespace linattn::cpu {

template <class A>
using mat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class A>
using row_vec = Eigen::Matrix<A, 1, Eigen::Dynamic>;
template <class A>
using col_vec = Eigen::Matrix<A, Eigen::Dynamic, 1>;

}  // namespace linattn::cpu
