// SPDX-License-Identifier: MIT
/// \file
/// The entry points of the householder rules at float, compiled once for all test files
/// (support/instantiations.hpp).
#include "../support/instantiations.hpp"

LINATTN_TEST_HOUSEHOLDER(LINATTN_TEST_DEFINE, float)
