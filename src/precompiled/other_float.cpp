// SPDX-License-Identifier: MIT
/// \file
/// linattn::precompiled: the forms of the other families' rules and the softmax rules at float (the list is in <linattn/precompiled.hpp>).
#include <linattn/linattn.hpp>
#include <linattn/precompiled.hpp>

LINATTN_PRECOMPILED_OTHER(LINATTN_PRECOMPILED_DEFINE, float)
LINATTN_PRECOMPILED_SOFTMAX(, float)
