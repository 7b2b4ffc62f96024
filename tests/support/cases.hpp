// SPDX-License-Identifier: MIT
/// \file
/// Rule x scalar-type lists for TEMPLATE_LIST_TEST_CASE.
#pragma once

#include <tuple>

#include "harness.hpp"

namespace harness {

using additive_cases = std::tuple<rule_case<la::Hebbian, float>, rule_case<la::Hebbian, double>,
                                  rule_case<la::ScalarDecay, float>, rule_case<la::ScalarDecay, double>,
                                  rule_case<la::VectorDecay, float>, rule_case<la::VectorDecay, double>,
                                  rule_case<la::LonghornDiagonal, float>, rule_case<la::LonghornDiagonal, double>>;

using householder_cases = std::tuple<rule_case<la::Delta, float>, rule_case<la::Delta, double>,
                                     rule_case<la::GatedDelta, float>, rule_case<la::GatedDelta, double>,
                                     rule_case<la::Longhorn, float>, rule_case<la::Longhorn, double>,
                                     rule_case<la::KDA, float>, rule_case<la::KDA, double>>;

using all_cases = decltype(std::tuple_cat(additive_cases{}, householder_cases{}));

}  // namespace harness
