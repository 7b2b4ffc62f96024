// SPDX-License-Identifier: MIT
/// \file
/// The single exception type thrown for bad calls.
#pragma once

#include <stdexcept>
#include <string>

namespace linattn {

/// Thrown before anything is written when a call's arguments are invalid. The message names
/// the function, the argument, what it got and what was expected.
class error : public std::invalid_argument {
 public:
  explicit error(const std::string& what) : std::invalid_argument(what) {}
};

}  // namespace linattn
