// SPDX-License-Identifier: MIT
/// \file
/// linattn._cuda: `forward_<rule>` and `backward_<rule>` for the rules linattn::cuda implements, on float32 device
/// arrays (the Python layer converts), queued on the caller's stream (torch's current stream,
/// passed as an integer handle). Outputs are torch tensors from its caching allocator; the
/// library's own workspace comes from its stream-ordered pool (linattn::cuda takes no caller
/// workspace; docs/python.md#cuda-tensors).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>

#include "../make_inputs.hpp"
#include "device_calls.hpp"

namespace linattn::python {

template <class Rule>
void forward_cuda(const std::string& form, const array& q, const array& k, const array& v, const arrays& extras,
                  const array& out, const maybe_array& initial_state, const maybe_array& final_state,
                  const maybe_array& cu_seqlens, double scale, double number, std::uintptr_t stream) {
  if (q.dtype() != nb::dtype<float>()) bad_argument("q", "must be float32 here (the Python layer converts)");
  if (form != "chunk" && form != "recurrent") bad_argument("form", "is '" + form + "', expected 'chunk' or 'recurrent'");
  const auto in = make_inputs<Rule, float>(q, k, v, extras, number, memory::device);
  const auto opt = make_options<float>(scale, initial_state, final_state, cu_seqlens, memory::device, memory::any);
  const auto o = as_view<float, 4>(out, "out", memory::device);
  const nb::gil_scoped_release unlocked;
  cuda_forward<Rule>(form == "chunk", in, o, opt, stream);
}

template <class Rule>
void backward_cuda(const array& q, const array& k, const array& v, const arrays& extras, const array& grad_out,
                   const maybe_array& grad_final_state, const maybe_array& initial_state,
                   const maybe_array& grad_initial_state, const array& dq, const array& dk, const array& dv,
                   const arrays& dextras, const maybe_array& cu_seqlens, double scale, double number,
                   std::uintptr_t stream) {
  if (q.dtype() != nb::dtype<float>()) bad_argument("q", "must be float32 here (the Python layer converts)");
  const auto in = make_inputs<Rule, float>(q, k, v, extras, number, memory::device);
  const auto grads = make_gradients<Rule, float>(dq, dk, dv, dextras, memory::device);
  const auto opt = make_backward_options<float>(scale, initial_state, grad_final_state, grad_initial_state, cu_seqlens,
                                                memory::device, memory::any);
  const auto dout = as_view<const float, 4>(grad_out, "grad_out", memory::device);
  const nb::gil_scoped_release unlocked;
  cuda_backward<Rule>(in, dout, grads, opt, stream);
}

template <class Rule>
void bind(nb::module_& m, const std::string& name) {
  using namespace nb::literals;
  m.def(("forward_" + name).c_str(), &forward_cuda<Rule>, "form"_a, "q"_a, "k"_a, "v"_a, "extras"_a, "out"_a,
        "initial_state"_a.none(), "final_state"_a.none(), "cu_seqlens"_a.none(), "scale"_a, "number"_a, "stream"_a);
  m.def(("backward_" + name).c_str(), &backward_cuda<Rule>, "q"_a, "k"_a, "v"_a, "extras"_a, "grad_out"_a,
        "grad_final_state"_a.none(), "initial_state"_a.none(), "grad_initial_state"_a.none(), "dq"_a, "dk"_a, "dv"_a,
        "dextras"_a, "cu_seqlens"_a.none(), "scale"_a, "number"_a, "stream"_a);
}

}  // namespace linattn::python

NB_MODULE(_cuda, m) {
  m.doc() = "linattn CUDA forward and backward kernels (internal: use linattn.torch)";
  using namespace linattn;
  python::bind<Hebbian>(m, "hebbian");
  python::bind<ScalarDecay>(m, "scalar_decay");
  python::bind<Delta>(m, "delta");
  python::bind<GatedDelta>(m, "gated_delta");
  python::bind<Longhorn>(m, "longhorn");
}
