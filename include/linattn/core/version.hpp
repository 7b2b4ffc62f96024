// SPDX-License-Identifier: MIT
/// \file
/// The library's version (CMakeLists.txt reads it from here: one source of truth).
#pragma once

#define LINATTN_VERSION_MAJOR 0
#define LINATTN_VERSION_MINOR 2
#define LINATTN_VERSION_PATCH 0
/// MAJOR * 10000 + MINOR * 100 + PATCH, for `#if LINATTN_VERSION >= 200`.
#define LINATTN_VERSION (LINATTN_VERSION_MAJOR * 10000 + LINATTN_VERSION_MINOR * 100 + LINATTN_VERSION_PATCH)

namespace linattn {
/// "MAJOR.MINOR.PATCH".
inline constexpr const char* version_string = "0.2.0";
}  // namespace linattn
