// SPDX-License-Identifier: MIT
/// \file
/// The CUDA side of the device tests: copies a float64 problem to the GPU in the chosen input
/// type and layout, calls linattn::cuda, and copies the results back. Output and state
/// buffers are filled with NaN bytes before every call so that an unwritten element shows.
/// Included by the device_runs*.cu files, each of which instantiates `run` and `bad_call` for
/// some of the rules (separate translation units so that the build compiles them in parallel).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <linattn/cuda.cuh>

#include "device_runs.hpp"

namespace cuda_tests {

namespace la = linattn;
using la::index_t;

namespace {

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// A device allocation, NaN-filled (all bits set) at birth.
class device_memory {
 public:
  explicit device_memory(std::size_t bytes) : bytes_(bytes) {
    ok(cudaMalloc(&p_, bytes ? bytes : 1), "cudaMalloc");
    ok(cudaMemset(p_, 0xff, bytes ? bytes : 1), "cudaMemset");
  }
  device_memory(const device_memory&) = delete;
  device_memory& operator=(const device_memory&) = delete;
  ~device_memory() { cudaFree(p_); }
  template <class E>
  E* as() const { return static_cast<E*>(p_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  std::size_t bytes_;
};

template <class E>
E convert(double x) { return la::cuda::detail::from_float<E>(static_cast<float>(x)); }

/// A [B, T, heads, D] tensor on the device, row-major or head-first ([B, heads, T, D]).
template <class E>
struct device_tensor {
  device_memory mem;
  la::tensor_view<E, 4> view;

  device_tensor(std::array<index_t, 4> e, bool head_first)
      : mem(std::size_t(e[0] * e[1] * e[2] * e[3]) * sizeof(E)) {
    std::array<index_t, 4> s{e[1] * e[2] * e[3], e[2] * e[3], e[3], 1};
    if (head_first) s = {e[1] * e[2] * e[3], e[3], e[1] * e[3], 1};
    view = la::tensor_view<E, 4>(mem.as<E>(), e, s);
  }
  /// Row-major logical values in; the layout is applied on the host.
  void set(const std::vector<double>& x) {
    std::vector<E> host(mem.bytes() / sizeof(E));
    for_each([&](index_t logical, index_t physical) { host[std::size_t(physical)] = convert<E>(x.at(std::size_t(logical))); });
    ok(cudaMemcpy(mem.as<E>(), host.data(), mem.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  std::vector<double> get() const {
    std::vector<E> host(mem.bytes() / sizeof(E));
    ok(cudaMemcpy(host.data(), mem.as<E>(), mem.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    std::vector<double> x(host.size());
    for_each([&](index_t logical, index_t physical) { x[std::size_t(logical)] = la::cuda::detail::to_float(host[std::size_t(physical)]); });
    return x;
  }

 private:
  template <class F>
  void for_each(F&& f) const {
    index_t logical = 0;
    for (index_t a = 0; a < view.extent(0); ++a)
      for (index_t b = 0; b < view.extent(1); ++b)
        for (index_t c = 0; c < view.extent(2); ++c)
          for (index_t d = 0; d < view.extent(3); ++d)
            f(logical++, a * view.stride(0) + b * view.stride(1) + c * view.stride(2) + d * view.stride(3));
  }
};

/// A contiguous [B, T, HV] tensor (gates, beta, delta), or [B, T, HV, K] (per-key gates).
template <class E, int R = 3>
struct device_scalars {
  device_memory mem;
  la::tensor_view<E, R> view;
  device_scalars(const std::vector<double>& x, const ref::dims& d) : mem(x.size() * sizeof(E)) {
    if constexpr (R == 3) view = la::view(mem.as<E>(), index_t(d.B), index_t(d.T), index_t(d.HV));
    else view = la::view(mem.as<E>(), index_t(d.B), index_t(d.T), index_t(d.HV), index_t(d.K));
    std::vector<E> host(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) host[i] = convert<E>(x[i]);
    ok(cudaMemcpy(mem.as<E>(), host.data(), mem.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
};

template <class E>
E* offset_rows(E* p, index_t t, index_t stride_t) { return p + t * stride_t; }

/// Tokens [t0, t0 + n) of a [B, T, ...] view: [B, n, ...].
template <class E, int R>
la::tensor_view<E, R> tokens(const la::tensor_view<E, R>& v, index_t t0, index_t n) {
  auto e = v.extents();
  e[1] = n;
  return la::tensor_view<E, R>(v.data() + t0 * v.stride(1), e, v.strides());
}

/// The same for a coefficient view of either element type.
template <class N, class W, int R>
la::either_view<N, W, R> tokens(const la::either_view<N, W, R>& v, index_t t0, index_t n) {
  if (v.wide()) return tokens(la::tensor_view<W, R>(static_cast<W*>(v.data()), v.extents(), v.strides()), t0, n);
  return tokens(la::tensor_view<N, R>(static_cast<N*>(v.data()), v.extents(), v.strides()), t0, n);
}

/// One token of a [B, T, ...] view: [B, 1, ...].
template <class E, int R>
la::tensor_view<E, R> token(const la::tensor_view<E, R>& v, index_t t) { return tokens(v, t, 1); }

/// Gates or betas on the device in the input type E or, for mixed precision, in float; rank 4
/// for per-key gates.
template <class E, int R = 3>
struct device_coefficients {
  std::optional<device_scalars<E, R>> narrow;
  std::optional<device_scalars<float, R>> wide;
  /// Copies x to the device and returns the rule's coefficient view of it.
  auto set(const std::vector<double>& x, const ref::dims& d, bool in_float) {
    using view_t = la::coefficient_view<E, R>;
    if (in_float) return view_t(wide.emplace(x, d).view);
    return view_t(narrow.emplace(x, d).view);
  }
};

template <class Rule, class E>
struct device_problem {
  device_tensor<E> q, k, v;
  device_coefficients<E, Rule::decay == la::decay_kind::vector ? 4 : 3> g;
  device_coefficients<E> beta;
  typename Rule::template inputs<E> in{};

  device_problem(const ref::problem& p, bool head_first, bool float_coefficients = false)
      : q({p.d.B, p.d.T, p.d.H, p.d.K}, head_first),
        k({p.d.B, p.d.T, p.d.H, p.d.K}, head_first),
        v({p.d.B, p.d.T, p.d.HV, p.d.V}, head_first) {
    q.set(p.q);
    k.set(p.k);
    v.set(p.v);
    in.q = q.view;
    in.k = k.view;
    in.v = v.view;
    if constexpr (requires { in.g; }) in.g = g.set(p.g, p.d, float_coefficients);
    if constexpr (requires { in.beta; }) in.beta = beta.set(p.beta, p.d, float_coefficients);
    if constexpr (requires { in.delta; }) in.delta = beta.set(p.beta, p.d, float_coefficients);
  }

  /// The same inputs restricted to tokens [t0, t0 + n).
  typename Rule::template inputs<E> range(index_t t0, index_t n) const {
    auto x = in;
    x.q = tokens(in.q, t0, n);
    x.k = tokens(in.k, t0, n);
    x.v = tokens(in.v, t0, n);
    if constexpr (requires { x.g; }) x.g = tokens(in.g, t0, n);
    if constexpr (requires { x.beta; }) x.beta = tokens(in.beta, t0, n);
    if constexpr (requires { x.delta; }) x.delta = tokens(in.delta, t0, n);
    return x;
  }
  typename Rule::template inputs<E> at(index_t t) const { return range(t, 1); }
};

std::vector<double> read_floats(const device_memory& m) {
  std::vector<float> host(m.bytes() / sizeof(float));
  ok(cudaMemcpy(host.data(), m.as<float>(), m.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return {host.begin(), host.end()};
}

void write_floats(device_memory& m, const std::vector<double>& x) {
  std::vector<float> host(x.begin(), x.end());
  ok(cudaMemcpy(m.as<float>(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

/// The problem's packed-batch offsets for a call (none when p.cu is empty): int32 in device
/// memory or int64 in host memory, set as opt.cu_seqlens; alive as long as the call needs them.
struct call_seqlens {
  std::vector<std::int64_t> host;
  device_memory device;

  call_seqlens(const ref::problem& p, bool on_device, la::options<float>& opt)
      : host(p.cu), device(p.cu.size() * sizeof(std::int32_t)) {
    if (p.cu.empty()) return;
    if (on_device) {
      const std::vector<std::int32_t> narrow(p.cu.begin(), p.cu.end());
      ok(cudaMemcpy(device.as<std::int32_t>(), narrow.data(), device.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
      opt.cu_seqlens = la::tensor_view<const std::int32_t, 1>(device.as<std::int32_t>(), {index_t(narrow.size())}, {1});
    } else {
      opt.cu_seqlens = la::tensor_view<const std::int64_t, 1>(host.data(), {index_t(host.size())}, {1});
    }
  }
};

/// recurrent_forward or chunkwise_forward.
template <class Rule, class E>
void forward(form f, const typename Rule::template inputs<E>& in, la::tensor_view<E, 4> out, const la::options<float>& opt) {
  if (f != form::chunkwise) return la::cuda::recurrent_forward<Rule>(in, out, opt);
  la::cuda::chunkwise_forward<Rule>(in, out, opt);
}

template <class Rule, class E>
outcome run_typed(const ref::problem& p, form f, const config& c) {
  const auto& d = p.d;
  device_problem<Rule, E> dp(p, c.head_first, c.float_coefficients);
  device_tensor<E> out({d.B, d.T, d.HV, d.V}, c.head_first);
  const index_t N = p.sequences();
  const std::size_t state_elems = std::size_t(N) * d.HV * d.K * d.V;
  device_memory s0(state_elems * sizeof(float)), s1(state_elems * sizeof(float));
  const auto state_view = [&](device_memory& m) { return la::view(m.as<float>(), N, index_t(d.HV), index_t(d.K), index_t(d.V)); };
  if (c.use_s0) write_floats(s0, p.s0);
  else ok(cudaMemset(s0.as<float>(), 0, s0.bytes()), "cudaMemset");

  la::options<float> opt;
  opt.scale = p.scale;
  opt.normalize_qk = c.normalize_qk;
  if (c.tf32) opt.precision = la::product_precision::tf32;
  const call_seqlens cu(p, c.cu_on_device, opt);
  outcome r;
  if (c.through_pool) {
    // [P, HV, K, V] with P = N + 2: sequence n in slot N + 1 - n; slots 0 and 1 hold 7.0 and
    // must keep it. The pool is read and written in place.
    const index_t P = N + 2, per = index_t(d.HV) * d.K * d.V;
    std::vector<double> pool_host(std::size_t(P * per), 7.0);
    std::vector<std::int32_t> slots(static_cast<std::size_t>(N), 0);
    for (index_t n = 0; n < N; ++n) {
      slots[std::size_t(n)] = std::int32_t(N + 1 - n);
      for (index_t e = 0; e < per; ++e)
        pool_host[std::size_t((N + 1 - n) * per + e)] = c.use_s0 ? p.s0[std::size_t(n * per + e)] : 0.0;
    }
    device_memory pool(pool_host.size() * sizeof(float)), idx(slots.size() * sizeof(std::int32_t));
    write_floats(pool, pool_host);
    ok(cudaMemcpy(idx.as<std::int32_t>(), slots.data(), idx.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    const auto pool_view = la::view(pool.as<float>(), P, index_t(d.HV), index_t(d.K), index_t(d.V));
    opt.state_indices = la::tensor_view<const std::int32_t, 1>(c.slots_on_host ? slots.data() : idx.as<std::int32_t>(), {N}, {1});
    if (f == form::decode) {
      for (index_t t = 0; t < d.T; ++t) la::cuda::decode_step<Rule>(dp.at(t), token(out.view, t), pool_view, opt);
    } else {
      opt.initial_state = pool_view;
      opt.final_state = pool_view;
      forward<Rule>(f, dp.in, out.view, opt);
    }
    ok(cudaDeviceSynchronize(), name(f));
    const std::vector<double> after = read_floats(pool);
    for (index_t e = 0; e < 2 * per; ++e)
      if (after[std::size_t(e)] != 7.0) r.pool_others_untouched = false;
    for (index_t n = 0; n < N; ++n)
      r.s.insert(r.s.end(), after.begin() + std::ptrdiff_t((N + 1 - n) * per), after.begin() + std::ptrdiff_t((N + 2 - n) * per));
  } else if (f == form::decode) {
    for (index_t t = 0; t < d.T; ++t)
      la::cuda::decode_step<Rule>(dp.at(t), token(out.view, t), state_view(s0), la::options<float>{.scale = p.scale, .normalize_qk = c.normalize_qk});
    ok(cudaDeviceSynchronize(), "decode_step");
    r.s = read_floats(s0);
  } else {
    if (c.use_s0) opt.initial_state = state_view(s0);
    if (c.want_state) opt.final_state = state_view(s1);
    forward<Rule>(f, dp.in, out.view, opt);
    ok(cudaDeviceSynchronize(), name(f));
    if (c.want_state) r.s = read_floats(s1);
  }
  r.o = out.get();
  for (double x : r.o)
    if (std::isnan(x)) r.out_all_written = false;
  return r;
}

}  // namespace

template <class Rule>
outcome run(const ref::problem& p, dtype t, form f, const config& c) {
  switch (t) {
    case dtype::f32: return run_typed<Rule, float>(p, f, c);
    case dtype::f16: return run_typed<Rule, __half>(p, f, c);
    default: return run_typed<Rule, __nv_bfloat16>(p, f, c);
  }
}

/// Tokens of the longest sequence (T without packing).
inline index_t longest(const ref::problem& p) {
  index_t L = p.cu.empty() ? p.d.T : 0;
  for (std::size_t n = 0; n + 1 < p.cu.size(); ++n) L = std::max<index_t>(L, p.cu[n + 1] - p.cu[n]);
  return L;
}

template <class Rule, class E>
draft_outcome drafts_typed(const ref::problem& p, const std::vector<std::int64_t>& accepted, bool on_device, bool per_key) {
  const auto& d = p.d;
  device_problem<Rule, E> dp(p, false);
  device_tensor<E> out({d.B, d.T, d.HV, d.V}, false);
  const index_t N = p.sequences(), P = N + 2, per = index_t(d.HV) * d.K * d.V;
  const index_t L = longest(p);
  std::vector<double> pool_host(std::size_t(P * per), 7.0);
  std::vector<std::int32_t> slots(static_cast<std::size_t>(N));
  for (index_t n = 0; n < N; ++n) {
    slots[std::size_t(n)] = std::int32_t(N + 1 - n);
    for (index_t e = 0; e < per; ++e) pool_host[std::size_t((N + 1 - n) * per + e)] = p.s0[std::size_t(n * per + e)];
  }
  device_memory pool(pool_host.size() * sizeof(float)), idx(slots.size() * sizeof(std::int32_t)),
      acc(accepted.size() * sizeof(std::int64_t));
  write_floats(pool, pool_host);
  const std::vector<double> before = read_floats(pool);
  ok(cudaMemcpy(idx.as<std::int32_t>(), slots.data(), idx.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  ok(cudaMemcpy(acc.as<std::int64_t>(), accepted.data(), acc.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  const index_t G = per_key ? d.K : 1;
  device_memory keys(std::size_t(N * L * d.HV * d.K) * sizeof(float)), updates(std::size_t(N * L * d.HV * d.V) * sizeof(float)),
      decay(std::size_t(N * L * d.HV * G) * sizeof(float));
  const la::draft_record<float> rec{la::view(keys.as<float>(), N, L, index_t(d.HV), index_t(d.K)),
                                    la::view(updates.as<float>(), N, L, index_t(d.HV), index_t(d.V)),
                                    la::view(decay.as<float>(), N, L, index_t(d.HV), G)};
  la::options<float> opt;
  opt.scale = p.scale;
  const call_seqlens cu(p, true, opt);
  opt.state_indices = la::tensor_view<const std::int32_t, 1>(idx.as<std::int32_t>(), {N}, {1});
  const auto pool_view = la::view(pool.as<float>(), P, index_t(d.HV), index_t(d.K), index_t(d.V));
  la::cuda::verify_drafts<Rule>(dp.in, out.view, pool_view, rec, opt);
  ok(cudaDeviceSynchronize(), "verify_drafts");
  draft_outcome r;
  r.pool_kept = read_floats(pool) == before;
  const la::integer_list_view counts =
      on_device ? la::integer_list_view(la::tensor_view<const std::int64_t, 1>(acc.as<std::int64_t>(), {N}, {1}))
                : la::integer_list_view(la::tensor_view<const std::int64_t, 1>(accepted.data(), {N}, {1}));
  la::cuda::commit_drafts(pool_view, rec, counts, opt);
  ok(cudaDeviceSynchronize(), "commit_drafts");
  const std::vector<double> after = read_floats(pool);
  for (index_t e = 0; e < 2 * per; ++e)
    if (after[std::size_t(e)] != 7.0) r.others_untouched = false;
  for (index_t n = 0; n < N; ++n)
    r.s.insert(r.s.end(), after.begin() + std::ptrdiff_t((N + 1 - n) * per), after.begin() + std::ptrdiff_t((N + 2 - n) * per));
  r.o = out.get();
  for (double x : r.o)
    if (std::isnan(x)) r.out_all_written = false;
  return r;
}

template <class Rule>
draft_outcome run_drafts(const ref::problem& p, dtype t, const std::vector<std::int64_t>& accepted, bool on_device,
                         bool per_key) {
  switch (t) {
    case dtype::f32: return drafts_typed<Rule, float>(p, accepted, on_device, per_key);
    case dtype::f16: return drafts_typed<Rule, __half>(p, accepted, on_device, per_key);
    default: return drafts_typed<Rule, __nv_bfloat16>(p, accepted, on_device, per_key);
  }
}

template <class Rule, class E>
std::vector<double> checkpoints_typed(const ref::problem& p, int every, form f) {
  const auto& d = p.d;
  device_problem<Rule, E> dp(p, false);
  device_tensor<E> out({d.B, d.T, d.HV, d.V}, false);
  const index_t N = p.sequences(), per = index_t(d.HV) * d.K * d.V;
  const index_t L = longest(p);
  const index_t J = (L + every - 1) / every;
  device_memory s0(std::size_t(N * per) * sizeof(float)), cp(std::size_t(N * J * per) * sizeof(float));
  write_floats(s0, p.s0);
  la::options<float> opt;
  opt.scale = p.scale;
  const call_seqlens cu(p, false, opt);
  opt.initial_state = la::view(s0.as<float>(), N, index_t(d.HV), index_t(d.K), index_t(d.V));
  opt.checkpoint_every = every;
  opt.checkpoints = la::tensor_view<float, 5>(cp.as<float>(), {N, J, index_t(d.HV), index_t(d.K), index_t(d.V)},
                                              {J * per, per, index_t(d.K) * d.V, index_t(d.V), 1});
  forward<Rule>(f, dp.in, out.view, opt);
  ok(cudaDeviceSynchronize(), "forward with checkpoints");
  return read_floats(cp);
}

template <class Rule>
std::vector<double> run_checkpoints(const ref::problem& p, dtype t, int every, form f) {
  switch (t) {
    case dtype::f32: return checkpoints_typed<Rule, float>(p, every, f);
    case dtype::f16: return checkpoints_typed<Rule, __half>(p, every, f);
    default: return checkpoints_typed<Rule, __nv_bfloat16>(p, every, f);
  }
}

template <class Rule, class E>
bool resume_typed(const ref::problem& p, int every, int entry) {
  const auto& d = p.d;
  const index_t B = d.B, T = d.T, HV = d.HV, K = d.K, V = d.V, per = HV * K * V, J = (T + every - 1) / every;
  const index_t t0 = index_t(entry + 1) * every;
  if (!p.cu.empty() || t0 >= T) throw std::runtime_error("resume_matches: a dense batch with tokens after the entry");
  device_problem<Rule, E> dp(p, false);
  device_tensor<E> out({B, T, HV, V}, false), rest({B, T - t0, HV, V}, false);
  device_memory s0(std::size_t(B * per) * sizeof(float)), s1(s0.bytes()), s2(s0.bytes()),
      cp(std::size_t(B * J * per) * sizeof(float));
  write_floats(s0, p.s0);
  const auto state = [&](const device_memory& m) { return la::view(m.as<float>(), B, HV, K, V); };
  la::options<float> opt;
  opt.scale = p.scale;
  opt.initial_state = state(s0);
  opt.final_state = state(s1);
  opt.checkpoint_every = every;
  opt.checkpoints = la::tensor_view<float, 5>(cp.as<float>(), {B, J, HV, K, V}, {J * per, per, K * V, V, 1});
  la::cuda::chunkwise_forward<Rule>(dp.in, out.view, opt);
  // the same call on tokens [t0, T), from checkpoint `entry`
  la::options<float> more;
  more.scale = p.scale;
  more.initial_state = la::tensor_view<const float, 4>(cp.as<float>() + entry * per, {B, HV, K, V}, {J * per, K * V, V, 1});
  more.final_state = state(s2);
  la::cuda::chunkwise_forward<Rule>(dp.range(t0, T - t0), rest.view, more);
  ok(cudaDeviceSynchronize(), "chunkwise_forward from a checkpoint");
  const std::vector<double> whole = out.get(), tail = rest.get();
  const std::size_t row = std::size_t(HV * V);
  for (index_t b = 0; b < B; ++b)
    for (index_t t = t0; t < T; ++t)
      for (std::size_t e = 0; e < row; ++e)
        if (whole[std::size_t(b * T + t) * row + e] != tail[std::size_t(b * (T - t0) + t - t0) * row + e]) return false;
  return read_floats(s1) == read_floats(s2);
}

template <class Rule>
bool resume_matches(const ref::problem& p, dtype t, int every, int entry) {
  switch (t) {
    case dtype::f32: return resume_typed<Rule, float>(p, every, entry);
    case dtype::f16: return resume_typed<Rule, __half>(p, every, entry);
    default: return resume_typed<Rule, __nv_bfloat16>(p, every, entry);
  }
}

template <class Rule>
std::string bad_call(const char* what) {
  const std::string w = what;
  const index_t K = w == "head_size" ? 96 : 64;
  ref::problem p;
  p.d = {1, 5, 1, 1, int(K), 64};
  auto fill = [](std::vector<double>& x, std::size_t n) { x.assign(n, 0.5); };
  fill(p.q, std::size_t(5 * K)), fill(p.k, std::size_t(5 * K)), fill(p.v, 5 * 64), fill(p.g, 5), fill(p.beta, 5);
  device_problem<Rule, float> dp(p, false);
  device_tensor<float> out({1, 5, 1, 64}, false);
  la::options<float> opt;
  std::vector<float> host_q(std::size_t(5 * K), 1.0f);
  auto in = dp.in;
  if (w == "host_pointer") in.q = la::view(static_cast<const float*>(host_q.data()), 1, 5, 1, K);
  if (w == "chunk_size") opt.chunk_size = 32;
  const std::int32_t two[1] = {2};  // slot 2 of a pool of 2
  device_memory idx(sizeof(two)), pool(std::size_t(2 * K * 64) * sizeof(float));
  ok(cudaMemcpy(idx.as<std::int32_t>(), two, sizeof(two), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  if (w == "state_index") {
    opt.state_indices = la::tensor_view<const std::int32_t, 1>(idx.as<std::int32_t>(), {1}, {1});
    opt.initial_state = la::view(pool.as<float>(), 2, 1, K, 64);
    opt.final_state = la::view(pool.as<float>(), 2, 1, K, 64);
  }
  if (w == "checkpoints") opt.checkpoint_every = 96;
  try {
    la::cuda::chunkwise_forward<Rule>(in, out.view, opt);
  } catch (const la::error& e) {
    // nothing may have been written
    for (double x : out.get())
      if (!std::isnan(x)) return std::string("wrote output before throwing: ") + e.what();
    return e.what();
  }
  return {};
}

/// A rule of the token kernel only (per-key decays): the forms it runs on CUDA.
#define LINATTN_TEST_TOKEN_RULE(R)                                                                             \
  template outcome run<la::R>(const ref::problem&, dtype, form, const config&);                                      \
  template draft_outcome run_drafts<la::R>(const ref::problem&, dtype, const std::vector<std::int64_t>&, bool, bool); \
  template std::vector<double> run_checkpoints<la::R>(const ref::problem&, dtype, int, form);

#define LINATTN_TEST_RULE(R)                                                                                   \
  LINATTN_TEST_TOKEN_RULE(R)                                                                                   \
  template bool resume_matches<la::R>(const ref::problem&, dtype, int, int);                                         \
  template std::string bad_call<la::R>(const char*);

}  // namespace cuda_tests
