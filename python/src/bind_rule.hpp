// SPDX-License-Identifier: MIT
/// \file
/// The CPU entry points of one rule as module functions `forward_<name>` and (rules with a
/// backward pass) `backward_<name>`. Every array is a DLPack array (a torch tensor): q, k, v
/// (and out, grad_out, dq, dk, dv) float32, float64, bfloat16 or float16 (q's dtype decides; the
/// Python layer converts anything else); gates and betas in that dtype or, for 16-bit q, float32
/// (read in place); states float32 for 16-bit q, else q's dtype. Outputs are allocated by the
/// caller (torch's allocator), and the GIL is released while the library runs.
#pragma once

#include <nanobind/stl/string.h>

#include <linattn/linattn.hpp>

#include <cstdint>
#include <string>

#include "make_inputs.hpp"

namespace linattn::python {

template <>
struct dlpack_dtype<Eigen::bfloat16> {
  static nb::dlpack::dtype get() { return {std::uint8_t(nb::dlpack::dtype_code::Bfloat), 16, 1}; }
};
template <>
struct dlpack_dtype<Eigen::half> {
  static nb::dlpack::dtype get() { return {std::uint8_t(nb::dlpack::dtype_code::Float), 16, 1}; }
};

/// Calls f.template operator()<T>() with T the element type of q: float, double,
/// Eigen::bfloat16 or Eigen::half (16-bit q, k, v are read as they are; states are float32).
template <class F>
void with_element_type(const array& q, F&& f) {
  if (q.dtype() == nb::dtype<float>()) return f.template operator()<float>();
  if (q.dtype() == nb::dtype<double>()) return f.template operator()<double>();
  if (q.dtype() == dlpack_dtype<Eigen::bfloat16>::get()) return f.template operator()<Eigen::bfloat16>();
  if (q.dtype() == dlpack_dtype<Eigen::half>::get()) return f.template operator()<Eigen::half>();
  bad_argument("q", "must be float32, float64, bfloat16 or float16 at this level (the Python layer converts others)");
}

/// forward_<rule>(form, q, k, v, extras, out, initial_state, final_state, cu_seqlens, scale,
/// normalize_qk, number, chunk_size, threads, check_finite, checkpoints=None): form "chunk"
/// (chunkwise_forward) or "recurrent" (recurrent_forward); `checkpoints` `[N, J, HV, K, V]`
/// receives the state after every chunk_size tokens (options::checkpoints).
template <class Rule>
void forward(const std::string& form, const array& q, const array& k, const array& v, const arrays& extras,
             const array& out, const maybe_array& initial_state, const maybe_array& final_state,
             const maybe_array& cu_seqlens, double scale, bool normalize_qk, double number, int chunk_size,
             int threads, bool check_finite, const maybe_array& checkpoints) {
  with_element_type(q, [&]<class T>() {
    const auto in = make_inputs<Rule, T>(q, k, v, extras, number, memory::host);
    auto opt = make_options<state_t<T>>(scale, normalize_qk, initial_state, final_state, cu_seqlens, memory::host, memory::host);
    opt.check_finite = check_finite;
    opt.chunk_size = chunk_size;
    opt.threads = threads;
    opt.checkpoints = as_view<state_t<T>, 5>(checkpoints, "checkpoints", memory::host);
    if (checkpoints) opt.checkpoint_every = chunk_size;
    const auto o = as_view<T, 4>(out, "out", memory::host);
    const nb::gil_scoped_release unlocked;
    if (form == "chunk") chunkwise_forward<Rule>(in, o, opt);
    else if (form == "recurrent") recurrent_forward<Rule>(in, o, opt);
    else bad_argument("form", "is '" + form + "', expected 'chunk' or 'recurrent'");
  });
}

/// backward_<rule>(q, k, v, extras, grad_out, grad_final_state, initial_state,
/// grad_initial_state, dq, dk, dv, dextras, cu_seqlens, scale, normalize_qk, number, chunk_size,
/// threads): chunkwise_backward (the
/// gradients of either forward form: they compute the same function).
template <class Rule>
void backward(const array& q, const array& k, const array& v, const arrays& extras, const array& grad_out,
              const maybe_array& grad_final_state, const maybe_array& initial_state,
              const maybe_array& grad_initial_state, const array& dq, const array& dk, const array& dv,
              const arrays& dextras, const maybe_array& cu_seqlens, double scale, bool normalize_qk, double number,
              int chunk_size, int threads) {
  with_element_type(q, [&]<class T>() {
    const auto in = make_inputs<Rule, T>(q, k, v, extras, number, memory::host);
    const auto grads = make_gradients<Rule, T>(dq, dk, dv, dextras, memory::host);
    auto opt = make_backward_options<state_t<T>>(scale, normalize_qk, initial_state, grad_final_state, grad_initial_state, cu_seqlens,
                                        memory::host, memory::host);
    opt.chunk_size = chunk_size;
    opt.threads = threads;
    const auto dout = as_view<const T, 4>(grad_out, "grad_out", memory::host);
    const nb::gil_scoped_release unlocked;
    chunkwise_backward<Rule>(in, dout, grads, opt);
  });
}

/// Registers forward_<name> and, when the rule has a backward pass, backward_<name>.
template <class Rule>
void bind_rule(nb::module_& m, const std::string& name) {
  using namespace nb::literals;
  m.def(("forward_" + name).c_str(), &forward<Rule>, "form"_a, "q"_a, "k"_a, "v"_a, "extras"_a, "out"_a,
        "initial_state"_a.none(), "final_state"_a.none(), "cu_seqlens"_a.none(), "scale"_a, "normalize_qk"_a, "number"_a, "chunk_size"_a,
        "threads"_a, "check_finite"_a, "checkpoints"_a.none() = nb::none());
  if constexpr (has_gradients<Rule>)
    m.def(("backward_" + name).c_str(), &backward<Rule>, "q"_a, "k"_a, "v"_a, "extras"_a, "grad_out"_a,
          "grad_final_state"_a.none(), "initial_state"_a.none(), "grad_initial_state"_a.none(), "dq"_a, "dk"_a,
          "dv"_a, "dextras"_a, "cu_seqlens"_a.none(), "scale"_a, "normalize_qk"_a, "number"_a, "chunk_size"_a,
          "threads"_a);
}

}  // namespace linattn::python
