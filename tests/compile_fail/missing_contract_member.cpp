// SPDX-License-Identifier: MIT
// Compile-fail test: a Householder-family rule without its per-token `beta` must be rejected at
// compile time with one line naming the missing member (core/contracts.hpp). Built with
// LINATTN_CONTROL the rule has the member and must compile.
#include <linattn/linattn.hpp>

#include <vector>

namespace la = linattn;

struct DeltaWithoutBeta {
  static constexpr const char* name = "DeltaWithoutBeta";
  using family = la::householder_family;
  static constexpr la::decay_kind decay = la::decay_kind::none;
  template <class T>
  struct inputs {
    la::tensor_view<const T, 4> q, k, v;
  };
#ifdef LINATTN_CONTROL
  template <class T, class A>
  static A beta(const inputs<T>&, la::index_t, la::index_t, la::index_t, A) {
    return A(0.5);
  }
#endif
};

int main() {
  std::vector<float> q{0.5f, -0.25f, 0.75f, 1.0f, 0.1f, 0.2f, -0.3f, 0.4f}, o(8);
  DeltaWithoutBeta::inputs<float> in{.q = la::view(q.data(), 1, 2, 1, 4), .k = la::view(q.data(), 1, 2, 1, 4),
                                     .v = la::view(q.data(), 1, 2, 1, 4)};
  la::recurrent_forward<DeltaWithoutBeta>(in, la::view(o.data(), 1, 2, 1, 4));
  return o[7] == o[7] ? 0 : 1;
}
