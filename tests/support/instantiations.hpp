// SPDX-License-Identifier: MIT
/// \file
/// The library's entry points for every rule at float and double, declared as explicit
/// instantiations that linattn::precompiled defines (linked into every test executable): each
/// test file that calls them would otherwise compile every kernel again.
#pragma once

#include <linattn/linattn.hpp>
#include <linattn/precompiled.hpp>
