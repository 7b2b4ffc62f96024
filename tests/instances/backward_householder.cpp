// SPDX-License-Identifier: MIT
/// \file
/// The backward entry points of the householder rules at float and double, compiled once for the
/// backward tests (support/backward_instantiations.hpp).
#include "../support/backward_instantiations.hpp"

LINATTN_TEST_BACKWARD_HOUSEHOLDER(LINATTN_TEST_BACKWARD_DEFINE, float)
LINATTN_TEST_BACKWARD_HOUSEHOLDER(LINATTN_TEST_BACKWARD_DEFINE, double)
