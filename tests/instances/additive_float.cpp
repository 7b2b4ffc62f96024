// SPDX-License-Identifier: MIT
/// \file
/// The entry points of the additive rules at float, compiled once for all test files
/// (support/instantiations.hpp).
#include "../support/instantiations.hpp"

LINATTN_TEST_ADDITIVE(LINATTN_TEST_DEFINE, float)
