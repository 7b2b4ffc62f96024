// SPDX-License-Identifier: MIT
/// \file
/// The backward entry points of every linear rule at float and double: declared by
/// <linattn/precompiled.hpp>, compiled once in linattn::precompiled (support/instantiations.hpp).
#pragma once

#include "instantiations.hpp"
