// SPDX-License-Identifier: MIT
/// \file
/// The library's entry points for every (rule, scalar type) of cases.hpp, declared here as
/// explicit instantiations that tests/instances/*.cpp define: each test file that calls them
/// would otherwise compile every kernel again (test_forms.cpp alone: 120 s -> 28 s).
#pragma once

#include <linattn/linattn.hpp>

/// X(Rule, T) for the rules of one family at one scalar type.
#define LINATTN_TEST_ADDITIVE(X, T) \
  X(linattn::Hebbian, T) X(linattn::ScalarDecay, T) X(linattn::VectorDecay, T) X(linattn::LonghornDiagonal, T)
#define LINATTN_TEST_HOUSEHOLDER(X, T) \
  X(linattn::Delta, T) X(linattn::GatedDelta, T) X(linattn::Longhorn, T) X(linattn::KDA, T)

/// The four entry points of one (Rule, T) as explicit instantiation declarations
/// (Extern = extern) or definitions (Extern empty).
#define LINATTN_TEST_FORMS(Extern, Rule, T)                                                                          \
  Extern template void linattn::recurrent_forward<Rule, T>(const Rule::inputs<T>&, linattn::tensor_view<T, 4>,       \
                                                           const linattn::options<linattn::state_t<T>>&);           \
  Extern template void linattn::parallel_forward<Rule, T>(const Rule::inputs<T>&, linattn::tensor_view<T, 4>,        \
                                                          const linattn::options<linattn::state_t<T>>&);            \
  Extern template void linattn::chunkwise_forward<Rule, T>(const Rule::inputs<T>&, linattn::tensor_view<T, 4>,       \
                                                           const linattn::options<linattn::state_t<T>>&);           \
  Extern template void linattn::decode_step<Rule, T>(const Rule::inputs<T>&, linattn::tensor_view<T, 4>,             \
                                                     linattn::tensor_view<linattn::state_t<T>, 4>,                   \
                                                     const linattn::options<linattn::state_t<T>>&);

#define LINATTN_TEST_EXTERN(Rule, T) LINATTN_TEST_FORMS(extern, Rule, T)
#define LINATTN_TEST_DEFINE(Rule, T) LINATTN_TEST_FORMS(, Rule, T)

LINATTN_TEST_ADDITIVE(LINATTN_TEST_EXTERN, float)
LINATTN_TEST_ADDITIVE(LINATTN_TEST_EXTERN, double)
LINATTN_TEST_HOUSEHOLDER(LINATTN_TEST_EXTERN, float)
LINATTN_TEST_HOUSEHOLDER(LINATTN_TEST_EXTERN, double)
