// SPDX-License-Identifier: MIT
/// \file
/// TTT-Linear test harness: random problems for the float64 oracle (ttt_reference.hpp) and
/// calls of every library form on NaN-poisoned caller buffers (contiguous or strided).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "harness.hpp"
#include "ttt_reference.hpp"

namespace ttt_harness {

namespace la = linattn;
using harness::buffer;
using harness::form;
using harness::layout;
using la::index_t;

struct shape {
  int B = 2, T = 37, H = 2, HV = 4, D = 8, mb = 16;
};

/// Random problem: q, k, v ~ N(0, 1); eta = sigmoid(N(0, 1)) / D (eta_base = 1);
/// gam = 1 + 0.2 N, bet = 0.2 N; non-zero start weights w0 ~ 0.3 N and bias b0 ~ 0.3 N.
inline ttt_ref::problem make_problem(std::mt19937_64& rng, shape s, bool with_state = true,
                                     std::vector<std::int64_t> cu = {}) {
  std::normal_distribution<double> normal;
  ttt_ref::problem p;
  p.B = s.B, p.T = s.T, p.H = s.H, p.HV = s.HV, p.D = s.D, p.mb = s.mb;
  p.cu = std::move(cu);
  auto fill = [&](std::vector<double>& x, std::size_t n, double mean, double sd) {
    x.resize(n);
    for (auto& e : x) e = mean + sd * normal(rng);
  };
  const std::size_t tokens = std::size_t(s.B) * s.T;
  fill(p.q, tokens * s.H * s.D, 0, 1);
  fill(p.k, tokens * s.H * s.D, 0, 1);
  fill(p.v, tokens * s.HV * s.D, 0, 1);
  p.eta.resize(tokens * s.HV);
  for (auto& e : p.eta) e = 1.0 / (1.0 + std::exp(-normal(rng))) / s.D;
  fill(p.gam, std::size_t(s.HV) * s.D, 1.0, 0.2);
  fill(p.bet, std::size_t(s.HV) * s.D, 0.0, 0.2);
  if (with_state) {
    fill(p.w0, std::size_t(p.sequences()) * s.HV * s.D * s.D, 0, 0.3);
    fill(p.b0, std::size_t(p.sequences()) * s.HV * s.D, 0, 0.3);
  }
  return p;
}

/// tau_i = max(0, 1/i + lam_i) with lam ~ 0.3 N (learned position factors,
/// docs/math.md#ttt-learning-rates).
inline std::vector<double> random_tau(std::mt19937_64& rng, int mb) {
  std::normal_distribution<double> normal;
  std::vector<double> tau(static_cast<std::size_t>(mb), 0.0);
  for (int i = 0; i < mb; ++i) tau[std::size_t(i)] = std::max(0.0, 1.0 / (i + 1) + 0.3 * normal(rng));
  return tau;
}

struct config {
  index_t chunk = 16;
  int threads = 0;
  layout lay = layout::contiguous;
  bool want_cache = false;  // pass final_cache (then w/bias are the unfinished mini-batch's start)
  bool omit_tau = false;    // leave inputs.tau unset even when p.tau is filled
};

struct outcome {
  std::vector<double> o, w, bias, cache;
  bool padding_ok = true;
};

/// Runs one form on p with scalar type T. `decode` runs T single-token decode steps with
/// W, bias and cache updated in place.
template <class T>
outcome run(form f, const ttt_ref::problem& p, const config& c = {}) {
  using A = la::state_t<T>;
  const index_t B = p.B, Tn = p.T, H = p.H, HV = p.HV, D = p.D, N = p.sequences();
  buffer<T, 4> q({B, Tn, H, D}, c.lay, p.q), k({B, Tn, H, D}, c.lay, p.k);
  buffer<T, 4> v({B, Tn, HV, D}, c.lay, p.v), out({B, Tn, HV, D}, c.lay);
  buffer<T, 3> eta({B, Tn, HV}, c.lay, p.eta);
  buffer<T, 2> gam({HV, D}, c.lay, p.gam), bet({HV, D}, c.lay, p.bet);
  buffer<T, 1> tau({index_t(p.mb)}, c.lay);
  const bool has_tau = !p.tau.empty() && !c.omit_tau;
  if (has_tau) tau.set(p.tau);
  buffer<A, 4> w0({N, HV, D, D}, c.lay), w1({N, HV, D, D}, c.lay);
  buffer<A, 3> b0({N, HV, D}, c.lay), b1({N, HV, D}, c.lay);
  buffer<A, 4> c0({N, HV, D + 2, D}, c.lay), c1({N, HV, D + 2, D}, c.lay);
  if (!p.w0.empty()) w0.set(p.w0);
  if (!p.b0.empty()) b0.set(p.b0);
  if (!p.cache0.empty()) c0.set(p.cache0);

  typename la::TTTLinear::inputs<T> in{.q = q.view(), .k = k.view(), .v = v.view(), .eta = eta.view(),
                                       .ln_weight = gam.view(), .ln_bias = bet.view()};
  in.mini_batch = p.mb;
  if (has_tau) in.tau = tau.view();
  la::options<A> opt;
  opt.chunk_size = c.chunk;
  opt.threads = c.threads;
  if (p.scale != 1.0) opt.scale = p.scale;
  std::vector<std::int64_t> cu = p.cu;
  if (!cu.empty()) opt.cu_seqlens = la::view(cu.data(), cu.size());

  outcome res;
  if (f == form::decode) {
    auto zeros = [](std::size_t n) { return std::vector<double>(n, 0.0); };
    w1.set(p.w0.empty() ? zeros(std::size_t(N * HV * D * D)) : p.w0);
    b1.set(p.b0.empty() ? zeros(std::size_t(N * HV * D)) : p.b0);
    c1.set(p.cache0.empty() ? zeros(std::size_t(N * HV * (D + 2) * D)) : p.cache0);
    in.initial_bias = b1.view();
    in.final_bias = b1.view();
    in.initial_cache = c1.view();
    in.final_cache = c1.view();
    auto slice = [](const auto& view, index_t t0) {
      auto e = view.extents();
      e[1] = 1;
      return std::remove_cvref_t<decltype(view)>(view.data() + t0 * view.stride(1), e, view.strides());
    };
    for (index_t t = 0; t < Tn; ++t) {
      auto step = in;
      step.q = slice(q.view(), t), step.k = slice(k.view(), t), step.v = slice(v.view(), t);
      step.eta = slice(eta.view(), t);
      la::decode_step<la::TTTLinear>(step, slice(out.view(), t), w1.view(), opt);
    }
  } else {
    if (!p.w0.empty()) opt.initial_state = w0.view();
    if (!p.b0.empty()) in.initial_bias = b0.view();
    if (!p.cache0.empty()) in.initial_cache = c0.view();
    opt.final_state = w1.view();
    in.final_bias = b1.view();
    if (c.want_cache) in.final_cache = c1.view();
    switch (f) {
      case form::recurrent: la::recurrent_forward<la::TTTLinear>(in, out.view(), opt); break;
      case form::parallel: la::parallel_forward<la::TTTLinear>(in, out.view(), opt); break;
      case form::chunkwise: la::chunkwise_forward<la::TTTLinear>(in, out.view(), opt); break;
      case form::decode: break;
    }
  }
  res.o = out.get();
  res.w = w1.get();
  res.bias = b1.get();
  res.cache = c1.get();
  res.padding_ok = out.padding_untouched() && w1.padding_untouched() && b1.padding_untouched() &&
                   c1.padding_untouched();
  return res;
}

/// Tokens [t0, t1) of every batch row of p; the start state is replaced by the given one.
inline ttt_ref::problem slice_time(const ttt_ref::problem& p, int t0, int t1, std::vector<double> w0,
                                   std::vector<double> b0, std::vector<double> cache0) {
  ttt_ref::problem s = p;
  s.T = t1 - t0;
  s.w0 = std::move(w0), s.b0 = std::move(b0), s.cache0 = std::move(cache0);
  auto cut = [&](const std::vector<double>& x, int per_token) {
    std::vector<double> y;
    for (int b = 0; b < p.B; ++b)
      y.insert(y.end(), x.begin() + (std::size_t(b) * p.T + t0) * per_token,
               x.begin() + (std::size_t(b) * p.T + t1) * per_token);
    return y;
  };
  s.q = cut(p.q, p.H * p.D), s.k = cut(p.k, p.H * p.D), s.v = cut(p.v, p.HV * p.D), s.eta = cut(p.eta, p.HV);
  return s;
}

/// Rows [t0, t1) of every batch row of a [B, T, HV, D] output.
inline std::vector<double> rows(const std::vector<double>& o, const ttt_ref::problem& p, int t0, int t1) {
  std::vector<double> y;
  const std::size_t w = std::size_t(p.HV) * p.D;
  for (int b = 0; b < p.B; ++b)
    y.insert(y.end(), o.begin() + (std::size_t(b) * p.T + t0) * w, o.begin() + (std::size_t(b) * p.T + t1) * w);
  return y;
}

}  // namespace ttt_harness
