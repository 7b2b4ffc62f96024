// SPDX-License-Identifier: MIT
/// \file
/// linattn::precompiled: the forms of the additive rules at float (the list is in <linattn/precompiled.hpp>).
#include <linattn/linattn.hpp>
#include <linattn/precompiled.hpp>

LINATTN_PRECOMPILED_ADDITIVE(LINATTN_PRECOMPILED_DEFINE, float)
