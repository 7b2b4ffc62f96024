// SPDX-License-Identifier: MIT
/// \file
/// linattn::precompiled: the backward forms of the Householder rules (the list is in <linattn/precompiled.hpp>).
#include <linattn/linattn.hpp>
#include <linattn/precompiled.hpp>

LINATTN_PRECOMPILED_BACKWARD_HOUSEHOLDER(LINATTN_PRECOMPILED_BACKWARD_DEFINE, float)
LINATTN_PRECOMPILED_BACKWARD_HOUSEHOLDER(LINATTN_PRECOMPILED_BACKWARD_DEFINE, double)
