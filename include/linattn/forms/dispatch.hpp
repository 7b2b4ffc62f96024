// SPDX-License-Identifier: MIT
/// \file
/// Family -> algorithm dispatch. Each form has a primary template that fails to compile with
/// a readable message; a family that has an algorithm for a form specialises it.
#pragma once

#include "../core/family.hpp"

namespace linattn::detail {

template <class Family>
struct recurrent_algorithm {
  static_assert(always_false<Family>,
                "linattn::recurrent_forward: no recurrent algorithm exists for this rule's "
                "transition family (Rule::family)");
};

template <class Family>
struct parallel_algorithm {
  static_assert(always_false<Family>,
                "linattn::parallel_forward: no parallel algorithm exists for this rule's "
                "transition family (Rule::family)");
};

template <class Family>
struct chunkwise_algorithm {
  static_assert(always_false<Family>,
                "linattn::chunkwise_forward: no chunkwise algorithm exists for this rule's "
                "transition family (Rule::family)");
};

template <class Family>
struct decode_algorithm {
  static_assert(always_false<Family>,
                "linattn::decode_step: no decode algorithm exists for this rule's transition "
                "family (Rule::family)");
};

}  // namespace linattn::detail
