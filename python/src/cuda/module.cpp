// SPDX-License-Identifier: MIT
/// \file
/// linattn._cuda: `forward_<rule>` and `backward_<rule>` for the rules linattn::cuda implements
/// (`forward_<rule>` only for the per-key decays, VectorDecay and KDA), on device
/// arrays: q, k, v (and out, grad_out, dq, dk, dv) float32, bfloat16 or float16; g, beta and
/// their gradients in that dtype or float32 (fla's mixed precision, read in place); states
/// float32. Calls are queued on the caller's stream (torch's current stream, passed as an
/// integer handle). Outputs are torch tensors from its caching allocator, and so is the
/// library's workspace: the module installs torch's caching allocator as linattn::cuda's
/// workspace allocator when it is imported (docs/python.md#cuda-tensors).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>

#include "../make_inputs.hpp"
#include "device_calls.hpp"

namespace linattn::python {

template <>
struct dlpack_dtype<__nv_bfloat16> {
  static nb::dlpack::dtype get() { return {std::uint8_t(nb::dlpack::dtype_code::Bfloat), 16, 1}; }
};
template <>
struct dlpack_dtype<__half> {
  static nb::dlpack::dtype get() { return {std::uint8_t(nb::dlpack::dtype_code::Float), 16, 1}; }
};

/// Calls f(E{}) with E the element type of q: float, __nv_bfloat16 or __half.
template <class F>
void with_element_type(const array& q, F&& f) {
  if (q.dtype() == nb::dtype<float>()) return f(float{});
  if (q.dtype() == dlpack_dtype<__nv_bfloat16>::get()) return f(__nv_bfloat16{});
  if (q.dtype() == dlpack_dtype<__half>::get()) return f(__half{});
  bad_argument("q", "must be float32, bfloat16 or float16 here (the Python layer converts)");
}

template <class Rule>
void forward_cuda(const std::string& form, const array& q, const array& k, const array& v, const arrays& extras,
                  const array& out, const maybe_array& initial_state, const maybe_array& final_state,
                  const maybe_array& cu_seqlens, double scale, bool normalize_qk, double number, bool tf32,
                  std::uintptr_t stream, const maybe_array& checkpoints) {
  if (form != "chunk" && form != "recurrent") bad_argument("form", "is '" + form + "', expected 'chunk' or 'recurrent'");
  with_element_type(q, [&](auto e) {
    using E = decltype(e);
    const auto in = make_inputs<Rule, E>(q, k, v, extras, number, memory::device);
    auto opt = make_options<float>(scale, normalize_qk, initial_state, final_state, cu_seqlens, memory::device, memory::any);
    opt.precision = tf32 ? product_precision::tf32 : product_precision::exact;
    opt.checkpoints = as_view<float, 5>(checkpoints, "checkpoints", memory::device);
    if (checkpoints) opt.checkpoint_every = 64;  // the chunk of the device kernels
    const auto o = as_view<E, 4>(out, "out", memory::device);
    const nb::gil_scoped_release unlocked;
    cuda_forward<Rule, E>(form == "chunk", in, o, opt, stream);
  });
}

template <class Rule>
void backward_cuda(const array& q, const array& k, const array& v, const arrays& extras, const array& grad_out,
                   const maybe_array& grad_final_state, const maybe_array& initial_state,
                   const maybe_array& grad_initial_state, const array& dq, const array& dk, const array& dv,
                   const arrays& dextras, const maybe_array& cu_seqlens, double scale, bool normalize_qk,
                   double number, std::uintptr_t stream) {
  with_element_type(q, [&](auto e) {
    using E = decltype(e);
    const auto in = make_inputs<Rule, E>(q, k, v, extras, number, memory::device);
    const auto grads = make_gradients<Rule, E>(dq, dk, dv, dextras, memory::device);
    const auto opt = make_backward_options<float>(scale, normalize_qk, initial_state, grad_final_state, grad_initial_state,
                                                  cu_seqlens, memory::device, memory::any);
    const auto dout = as_view<const E, 4>(grad_out, "grad_out", memory::device);
    const nb::gil_scoped_release unlocked;
    cuda_backward<Rule, E>(in, dout, grads, opt, stream);
  });
}

/// `forward_<name>`, for every rule the CUDA backend runs.
template <class Rule>
void bind_forward(nb::module_& m, const std::string& name) {
  using namespace nb::literals;
  m.def(("forward_" + name).c_str(), &forward_cuda<Rule>, "form"_a, "q"_a, "k"_a, "v"_a, "extras"_a, "out"_a,
        "initial_state"_a.none(), "final_state"_a.none(), "cu_seqlens"_a.none(), "scale"_a, "normalize_qk"_a, "number"_a,
        "tf32"_a, "stream"_a, "checkpoints"_a.none() = nb::none());
}

/// `forward_<name>` and `backward_<name>`, for the rules with a CUDA chunkwise backward.
template <class Rule>
void bind(nb::module_& m, const std::string& name) {
  using namespace nb::literals;
  bind_forward<Rule>(m, name);
  m.def(("backward_" + name).c_str(), &backward_cuda<Rule>, "q"_a, "k"_a, "v"_a, "extras"_a, "grad_out"_a,
        "grad_final_state"_a.none(), "initial_state"_a.none(), "grad_initial_state"_a.none(), "dq"_a, "dk"_a, "dv"_a,
        "dextras"_a, "cu_seqlens"_a.none(), "scale"_a, "normalize_qk"_a, "number"_a,
        "stream"_a);
}

namespace {

// torch.cuda.caching_allocator_alloc and caching_allocator_delete, kept for the process.
nb::handle torch_allocate, torch_delete;

/// `bytes` from torch's caching allocator for work on `stream` (the current device's; the Python
/// layer makes q's device current). The library calls this with the GIL released.
void* torch_workspace(std::size_t bytes, std::uintptr_t stream, void*) {
  const nb::gil_scoped_acquire locked;
  try {
    return reinterpret_cast<void*>(nb::cast<std::uintptr_t>(torch_allocate(bytes, nb::none(), stream)));
  } catch (...) {
    return nullptr;  // the library throws linattn::error naming the size
  }
}

/// Hands a workspace back to torch's cache; torch may reuse it for later work on the same
/// stream, which runs after the call's kernels.
void torch_release(void* p, std::size_t, std::uintptr_t, void*) {
  const nb::gil_scoped_acquire locked;
  try {
    torch_delete(reinterpret_cast<std::uintptr_t>(p));
  } catch (...) {  // nothing to do: the block stays with torch
  }
}

}  // namespace

}  // namespace linattn::python

NB_MODULE(_cuda, m) {
  m.doc() = "linattn CUDA forward and backward kernels (internal: use linattn.torch)";
  using namespace linattn;
  const nanobind::module_ torch_cuda = nanobind::module_::import_("torch.cuda");
  python::torch_allocate = nanobind::object(torch_cuda.attr("caching_allocator_alloc")).release();
  python::torch_delete = nanobind::object(torch_cuda.attr("caching_allocator_delete")).release();
  python::use_workspace_allocator({python::torch_workspace, python::torch_release, nullptr});
  python::bind<Hebbian>(m, "hebbian");
  python::bind<ScalarDecay>(m, "scalar_decay");
  python::bind<Delta>(m, "delta");
  python::bind<GatedDelta>(m, "gated_delta");
  python::bind<Longhorn>(m, "longhorn");
  python::bind<VectorDecay>(m, "vector_decay");
  python::bind<KDA>(m, "kda");
}
