// SPDX-License-Identifier: MIT
/// \file
/// linattn._cpu: the CPU entry points for Python, `forward_<rule>` and `backward_<rule>`
/// (bind_rule.hpp), one rule per translation unit (rules/). linattn::error, a
/// std::invalid_argument, reaches Python as ValueError with the library's message.
#include <nanobind/nanobind.h>

#include <linattn/core/version.hpp>

namespace nb = nanobind;

namespace linattn::python {
#define LINATTN_PY_RULES(X) X(hebbian) X(scalar_decay) X(vector_decay) X(delta) X(gated_delta) X(longhorn) X(nlms) X(rls) X(kda) X(ttt_linear)
#define LINATTN_PY_DECLARE(name) void bind_##name(nb::module_& m);
LINATTN_PY_RULES(LINATTN_PY_DECLARE)
}  // namespace linattn::python

NB_MODULE(_cpu, m) {
  m.doc() = "linattn CPU kernels (internal: use linattn.torch)";
  m.attr("version") = LINATTN_VERSION;
#define LINATTN_PY_BIND(name) linattn::python::bind_##name(m);
  LINATTN_PY_RULES(LINATTN_PY_BIND)
}
