// SPDX-License-Identifier: MIT
// Compile-fail test: CPU inputs of an element type the library does not take (int) stop with
// one line naming the supported types. Built with LINATTN_CONTROL it uses float and must
// compile and run.
#include <linattn/linattn.hpp>

#include <vector>

namespace la = linattn;

#ifdef LINATTN_CONTROL
using element = float;
#else
using element = int;
#endif

int main() {
  std::vector<element> q(8, element(1)), o(8);
  la::Hebbian::inputs<element> in{.q = la::view<const element>(q.data(), 1, 2, 1, 4),
                                  .k = la::view<const element>(q.data(), 1, 2, 1, 4),
                                  .v = la::view<const element>(q.data(), 1, 2, 1, 4)};
  la::chunkwise_forward<la::Hebbian>(in, la::view(o.data(), 1, 2, 1, 4));
  return 0;
}
