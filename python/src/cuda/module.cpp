// SPDX-License-Identifier: MIT
/// \file
/// linattn._cuda: `forward_<rule>` for the rules linattn::cuda implements, on float32 device
/// arrays (the Python layer converts), queued on the caller's stream (torch's current stream,
/// passed as an integer handle). Outputs are torch tensors from its caching allocator; the
/// library's own workspace comes from its stream-ordered pool (linattn::cuda takes no caller
/// workspace; docs/python.md#cuda-tensors).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>

#include "../make_inputs.hpp"
#include "forward.hpp"

namespace linattn::python {

template <class Rule>
void forward_cuda(const std::string& form, const array& q, const array& k, const array& v, const arrays& extras,
                  const array& out, const maybe_array& initial_state, const maybe_array& final_state,
                  const maybe_array& cu_seqlens, double scale, double number, std::uintptr_t stream) {
  if (q.dtype() != nb::dtype<float>()) bad_argument("q", "must be float32 here (the Python layer converts)");
  if (form != "chunk" && form != "recurrent") bad_argument("form", "is '" + form + "', expected 'chunk' or 'recurrent'");
  const auto in = make_inputs<Rule, float>(q, k, v, extras, number, memory::device);
  options<float> opt;
  opt.scale = scale;
  opt.initial_state = as_view<const float, 4>(initial_state, "initial_state", memory::device);
  opt.final_state = as_view<float, 4>(final_state, "final_state", memory::device);
  opt.cu_seqlens = as_seqlens(cu_seqlens, memory::any);
  const auto o = as_view<float, 4>(out, "out", memory::device);
  const nb::gil_scoped_release unlocked;
  cuda_forward<Rule>(form == "chunk", in, o, opt, stream);
}

template <class Rule>
void bind(nb::module_& m, const std::string& name) {
  using namespace nb::literals;
  m.def(("forward_" + name).c_str(), &forward_cuda<Rule>, "form"_a, "q"_a, "k"_a, "v"_a, "extras"_a, "out"_a,
        "initial_state"_a.none(), "final_state"_a.none(), "cu_seqlens"_a.none(), "scale"_a, "number"_a, "stream"_a);
}

}  // namespace linattn::python

NB_MODULE(_cuda, m) {
  m.doc() = "linattn CUDA forward kernels (internal: use linattn.torch)";
  using namespace linattn;
  python::bind<Hebbian>(m, "hebbian");
  python::bind<ScalarDecay>(m, "scalar_decay");
  python::bind<Delta>(m, "delta");
  python::bind<GatedDelta>(m, "gated_delta");
  python::bind<Longhorn>(m, "longhorn");
}
