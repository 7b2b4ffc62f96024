// SPDX-License-Identifier: MIT
// Compile-fail test: a rule whose transition family has no chunkwise algorithm must be
// rejected at compile time with a readable message. Built with LINATTN_CONTROL it uses a
// supported rule and must compile (so the failure is due to the family, not the test).
#include <linattn/linattn.hpp>

#include <vector>

namespace la = linattn;

struct custom_family {};

/// A well-formed rule of a family no form implements.
struct Unimplemented {
  static constexpr const char* name = "Unimplemented";
  using family = custom_family;
  template <class T>
  struct inputs {
    la::tensor_view<const T, 4> q, k, v;
  };
};

#ifdef LINATTN_CONTROL
using rule_under_test = la::Hebbian;
#else
using rule_under_test = Unimplemented;
#endif

int main() {
  std::vector<float> q(8, 0.5f), o(8);
  rule_under_test::inputs<float> in{.q = la::view(q.data(), 1, 2, 1, 4), .k = la::view(q.data(), 1, 2, 1, 4),
                                    .v = la::view(q.data(), 1, 2, 1, 4)};
  la::chunkwise_forward<rule_under_test>(in, la::view(o.data(), 1, 2, 1, 4));
  return 0;
}
