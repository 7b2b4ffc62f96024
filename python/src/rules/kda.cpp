// SPDX-License-Identifier: MIT
// One translation unit per rule (float and double, every form it binds): the template
// instantiations are heavy, and this keeps each file's compile short and parallel.
#include "../bind_rule.hpp"

namespace linattn::python {
void bind_kda(nb::module_& m) { bind_rule<KDA>(m, "kda"); }
}  // namespace linattn::python
