// SPDX-License-Identifier: MIT
/// \file
/// Includes Catch2 v3 (newer distributions) or v2 (Debian bookworm) behind one name.
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif
