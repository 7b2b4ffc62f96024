// SPDX-License-Identifier: MIT
/// \file
/// The CUDA side of the backward device tests: the forward problem and the incoming gradients
/// go to the GPU in the chosen input type, linattn::cuda::chunkwise_backward runs, and the
/// gradients come back in float64. Gradient buffers are NaN-filled before the call. Included
/// by the backward_runs*.cu files, each instantiating some of the rules.
#pragma once

#include "device_runs.cuh"

namespace cuda_tests {

namespace {

template <class Rule, class E>
backward_outcome run_backward_typed(const ref::problem& p, const std::vector<double>& dout_values,
                                    const std::vector<double>& ds1_values, const config& c) {
  const auto& d = p.d;
  device_problem<Rule, E> dp(p, c.head_first, c.float_coefficients);
  device_tensor<E> dout({d.B, d.T, d.HV, d.V}, c.head_first);
  dout.set(dout_values);
  device_tensor<E> dq({d.B, d.T, d.H, d.K}, c.head_first), dk({d.B, d.T, d.H, d.K}, c.head_first);
  device_tensor<E> dv({d.B, d.T, d.HV, d.V}, c.head_first);
  const std::size_t per_token = std::size_t(d.B) * d.T * d.HV;
  constexpr bool per_key = Rule::decay == la::decay_kind::vector;  // dg [B, T, HV, K]
  const std::size_t gate_count = per_token * (per_key ? std::size_t(d.K) : 1);
  // dg, dbeta: in E, or in float under mixed precision
  const std::size_t coefficient_bytes = c.float_coefficients ? sizeof(float) : sizeof(E);
  device_memory dg(gate_count * coefficient_bytes), dbeta(per_token * coefficient_bytes);
  const index_t N = p.sequences();
  const std::size_t state_elems = std::size_t(N) * d.HV * d.K * d.V;
  device_memory s0(state_elems * sizeof(float)), ds1(state_elems * sizeof(float)), ds0(state_elems * sizeof(float));
  const auto state_view = [&](device_memory& m) { return la::view(m.as<float>(), N, index_t(d.HV), index_t(d.K), index_t(d.V)); };

  la::backward_options<float> opt;
  opt.scale = p.scale;
  opt.normalize_qk = c.normalize_qk;
  if (c.use_s0 && !p.s0.empty()) {
    write_floats(s0, p.s0);
    opt.initial_state = state_view(s0);
  }
  if (!ds1_values.empty()) {
    write_floats(ds1, ds1_values);
    opt.grad_final_state = state_view(ds1);
  }
  opt.grad_initial_state = state_view(ds0);
  const call_seqlens cu(p, c.cu_on_device, opt);
  la::gradients_t<Rule, E> gr{};
  gr.dq = dq.view, gr.dk = dk.view, gr.dv = dv.view;
  const auto per_token_view = [&](device_memory& m) {
    using view_t = la::coefficient_gradient_view<E, 3>;
    if (c.float_coefficients) return view_t(la::view(m.as<float>(), index_t(d.B), index_t(d.T), index_t(d.HV)));
    return view_t(la::view(m.as<E>(), index_t(d.B), index_t(d.T), index_t(d.HV)));
  };
  if constexpr (per_key) {
    using view_t = la::coefficient_gradient_view<E, 4>;
    gr.dg = c.float_coefficients ? view_t(la::view(dg.as<float>(), index_t(d.B), index_t(d.T), index_t(d.HV), index_t(d.K)))
                                 : view_t(la::view(dg.as<E>(), index_t(d.B), index_t(d.T), index_t(d.HV), index_t(d.K)));
  } else if constexpr (requires { gr.dg; }) {
    gr.dg = per_token_view(dg);
  }
  if constexpr (requires { gr.dbeta; }) gr.dbeta = per_token_view(dbeta);
  if constexpr (requires { gr.ddelta; }) gr.ddelta = per_token_view(dbeta);
  la::cuda::chunkwise_backward<Rule>(dp.in, dout.view, gr, opt);
  ok(cudaDeviceSynchronize(), "chunkwise_backward");

  backward_outcome r;
  r.dq = dq.get(), r.dk = dk.get(), r.dv = dv.get();
  const auto per_token_values = [&](device_memory& m, std::size_t count) {
    if (c.float_coefficients) return read_floats(m);
    std::vector<E> host(count);
    ok(cudaMemcpy(host.data(), m.as<E>(), count * sizeof(E), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    std::vector<double> x(count);
    for (std::size_t i = 0; i < count; ++i) x[i] = la::cuda::detail::to_float(host[i]);
    return x;
  };
  if constexpr (requires { gr.dg; }) r.dg = per_token_values(dg, gate_count);
  if constexpr (requires { gr.dbeta; } || requires { gr.ddelta; }) r.dbeta = per_token_values(dbeta, per_token);
  r.ds0 = read_floats(ds0);
  for (const auto* v : {&r.dq, &r.dk, &r.dv, &r.dg, &r.dbeta, &r.ds0})
    for (double x : *v)
      if (std::isnan(x)) r.all_written = false;
  return r;
}

}  // namespace

template <class Rule>
backward_outcome run_backward(const ref::problem& p, const std::vector<double>& dout, const std::vector<double>& ds1,
                              dtype t, const config& c) {
  switch (t) {
    case dtype::f32: return run_backward_typed<Rule, float>(p, dout, ds1, c);
    case dtype::f16: return run_backward_typed<Rule, __half>(p, dout, ds1, c);
    default: return run_backward_typed<Rule, __nv_bfloat16>(p, dout, ds1, c);
  }
}

template <class Rule>
std::string bad_backward_call(const char* what) {
  const std::string w = what;
  ref::problem p;
  p.d = {1, 5, 1, 1, 64, 64};
  auto fill = [](std::vector<double>& x, std::size_t n) { x.assign(n, 0.5); };
  fill(p.q, 5 * 64), fill(p.k, 5 * 64), fill(p.v, 5 * 64), fill(p.g, 5), fill(p.beta, 5);
  device_problem<Rule, float> dp(p, false);
  device_tensor<float> dout({1, 5, 1, 64}, false), dq({1, 5, 1, 64}, false), dk({1, 5, 1, 64}, false);
  device_tensor<float> dv({1, w == "dv_shape" ? 4 : 5, 1, 64}, false);
  device_memory extra_g(5 * sizeof(float)), extra_b(5 * sizeof(float));
  std::vector<float> host_dq(5 * 64);
  la::gradients_t<Rule, float> gr{};
  gr.dq = w == "host_dq" ? la::view(host_dq.data(), 1, 5, 1, 64) : dq.view;
  gr.dk = dk.view, gr.dv = dv.view;
  if constexpr (requires { gr.dg; }) gr.dg = la::view(extra_g.as<float>(), 1, 5, 1);
  if constexpr (requires { gr.dbeta; }) gr.dbeta = la::view(extra_b.as<float>(), 1, 5, 1);
  if constexpr (requires { gr.ddelta; }) gr.ddelta = la::view(extra_b.as<float>(), 1, 5, 1);
  try {
    la::cuda::chunkwise_backward<Rule>(dp.in, dout.view, gr, la::backward_options<float>{});
  } catch (const la::error& e) {
    for (const auto* t : {&dk, &dv})
      for (double x : t->get())
        if (!std::isnan(x)) return std::string("wrote a gradient before throwing: ") + e.what();
    return e.what();
  }
  return {};
}

#define LINATTN_TEST_BACKWARD_RULE(R)                                                                          \
  template backward_outcome run_backward<la::R>(const ref::problem&, const std::vector<double>&,            \
                                                const std::vector<double>&, dtype, const config&);          \
  template std::string bad_backward_call<la::R>(const char*);

}  // namespace cuda_tests
