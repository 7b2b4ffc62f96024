// SPDX-License-Identifier: MIT
/// \file
/// The backward entry points for every linear rule (NLMS included) and scalar type, declared
/// here as explicit instantiations that tests/instances/backward_*.cpp define (compiled once,
/// in parallel, instead of in every test file that calls them).
#pragma once

#include <linattn/linattn.hpp>

#define LINATTN_TEST_BACKWARD_ADDITIVE(X, T) X(linattn::Hebbian, T) X(linattn::ScalarDecay, T) X(linattn::VectorDecay, T)
#define LINATTN_TEST_BACKWARD_HOUSEHOLDER(X, T) \
  X(linattn::Delta, T) X(linattn::GatedDelta, T) X(linattn::Longhorn, T) X(linattn::NLMS, T)

#define LINATTN_TEST_BACKWARD_FORMS(Extern, Rule, T)                                                                \
  Extern template void linattn::recurrent_backward<Rule, T>(                                                        \
      const Rule::inputs<T>&, linattn::tensor_view<T, 4>, const Rule::gradients<T>&,                                \
      const linattn::backward_options<linattn::state_t<T>>&);                                                       \
  Extern template void linattn::chunkwise_backward<Rule, T>(                                                        \
      const Rule::inputs<T>&, linattn::tensor_view<T, 4>, const Rule::gradients<T>&,                                \
      const linattn::backward_options<linattn::state_t<T>>&);

#define LINATTN_TEST_BACKWARD_EXTERN(Rule, T) LINATTN_TEST_BACKWARD_FORMS(extern, Rule, T)
#define LINATTN_TEST_BACKWARD_DEFINE(Rule, T) LINATTN_TEST_BACKWARD_FORMS(, Rule, T)

LINATTN_TEST_BACKWARD_ADDITIVE(LINATTN_TEST_BACKWARD_EXTERN, float)
LINATTN_TEST_BACKWARD_ADDITIVE(LINATTN_TEST_BACKWARD_EXTERN, double)
LINATTN_TEST_BACKWARD_HOUSEHOLDER(LINATTN_TEST_BACKWARD_EXTERN, float)
LINATTN_TEST_BACKWARD_HOUSEHOLDER(LINATTN_TEST_BACKWARD_EXTERN, double)
