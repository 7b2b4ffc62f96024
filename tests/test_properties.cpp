// SPDX-License-Identifier: MIT
// Structural properties of the additive rules: docs/math.md#equivalences T2 (identity padding), T7
// (batch/head independence), T8 (linearity), R1 and R2 (reductions between rules), plus
// in-place state and broadcast (stride-0) gates.
#include "support/catch.hpp"
#include "support/cases.hpp"

using namespace harness;

namespace {
const ref::dims shape{.B = 2, .T = 29, .H = 2, .HV = 4, .K = 7, .V = 5};
}

TEMPLATE_LIST_TEST_CASE("identity padding to a multiple of C changes nothing (T2)", "[properties]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(31);
  const auto p = make_problem(rng, shape, spec_of<Rule>());
  for (index_t C : {8, 16}) {
    const int padded_T = int((shape.T + C - 1) / C * C);
    ref::problem padded = slice_time(p, 0, shape.T, p.s0);
    padded.d.T = padded_T;
    auto pad = [&](const std::vector<double>& x, int per_token) {  // zeros after each batch row
      std::vector<double> y;
      for (int b = 0; b < shape.B; ++b) {
        y.insert(y.end(), x.begin() + std::size_t(b) * shape.T * per_token, x.begin() + std::size_t(b + 1) * shape.T * per_token);
        y.insert(y.end(), std::size_t(padded_T - shape.T) * per_token, 0.0);
      }
      return y;
    };
    padded.q = pad(p.q, shape.H * shape.K);
    padded.k = pad(p.k, shape.H * shape.K);
    padded.v = pad(p.v, shape.HV * shape.V);
    if (!p.g.empty()) padded.g = pad(p.g, shape.HV * (p.kind == ref::decay::vector ? shape.K : 1));
    if (!p.beta.empty()) padded.beta = pad(p.beta, shape.HV);  // beta = 0 (Longhorn: delta = 0)
    for (form f : {form::chunkwise, form::parallel, form::recurrent}) {
      CAPTURE(C, name(f));
      const auto plain = run<Rule, T>(f, p, {.chunk = C});
      const auto with_pad = run<Rule, T>(f, padded, {.chunk = C});
      CHECK(rel_err(rows(with_pad.r.o, padded.d, 0, shape.T), plain.r.o) < tolerance<T>());
      CHECK(rel_err(with_pad.r.s, plain.r.s) < tolerance<T>());
    }
  }
}

TEMPLATE_LIST_TEST_CASE("permuting batch rows and heads permutes the outputs (T7)", "[properties]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(32);
  const auto p = make_problem(rng, shape, spec_of<Rule>());
  // Swap the two batch rows and the two q/k heads (value heads move with their q/k head).
  const int G = shape.HV / shape.H;
  auto hv_of = [&](int hv) { return (hv + G) % shape.HV; };
  ref::problem perm = p;
  for (int b = 0; b < shape.B; ++b)
    for (int t = 0; t < shape.T; ++t) {
      for (int h = 0; h < shape.H; ++h)
        for (int i = 0; i < shape.K; ++i) {
          perm.q[p.qk_at(1 - b, t, 1 - h, i)] = p.q[p.qk_at(b, t, h, i)];
          perm.k[p.qk_at(1 - b, t, 1 - h, i)] = p.k[p.qk_at(b, t, h, i)];
        }
      for (int hv = 0; hv < shape.HV; ++hv) {
        for (int j = 0; j < shape.V; ++j) perm.v[p.v_at(1 - b, t, hv_of(hv), j)] = p.v[p.v_at(b, t, hv, j)];
        const int gw = p.kind == ref::decay::vector ? shape.K : (p.kind == ref::decay::scalar ? 1 : 0);
        for (int i = 0; i < gw; ++i) perm.g[p.tok_at(1 - b, t, hv_of(hv)) * gw + i] = p.g[p.tok_at(b, t, hv) * gw + i];
        if (!p.beta.empty()) perm.beta[p.tok_at(1 - b, t, hv_of(hv))] = p.beta[p.tok_at(b, t, hv)];
      }
    }
  for (int b = 0; b < shape.B; ++b)
    for (int hv = 0; hv < shape.HV; ++hv)
      for (int i = 0; i < shape.K; ++i)
        for (int j = 0; j < shape.V; ++j) perm.s0[p.s_at(1 - b, hv_of(hv), i, j)] = p.s0[p.s_at(b, hv, i, j)];
  for (form f : all_forms) {
    CAPTURE(name(f));
    const auto a = run<Rule, T>(f, p, {.chunk = 8});
    const auto c = run<Rule, T>(f, perm, {.chunk = 8});
    std::vector<double> moved(a.r.o.size());
    for (int b = 0; b < shape.B; ++b)
      for (int t = 0; t < shape.T; ++t)
        for (int hv = 0; hv < shape.HV; ++hv)
          for (int j = 0; j < shape.V; ++j) moved[p.v_at(1 - b, t, hv_of(hv), j)] = a.r.o[p.v_at(b, t, hv, j)];
    CHECK(rel_err(c.r.o, moved) < tolerance<T>());
  }
}

TEMPLATE_LIST_TEST_CASE("outputs are linear in (V, S0) (T8)", "[properties]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(33);
  const auto p1 = make_problem(rng, shape, spec_of<Rule>());
  auto p2 = make_problem(rng, shape, spec_of<Rule>());
  p2.q = p1.q, p2.k = p1.k, p2.g = p1.g, p2.beta = p1.beta;
  ref::problem sum = p1;
  for (std::size_t i = 0; i < sum.v.size(); ++i) sum.v[i] += p2.v[i];
  for (std::size_t i = 0; i < sum.s0.size(); ++i) sum.s0[i] += p2.s0[i];
  for (form f : all_forms) {
    CAPTURE(name(f));
    const auto a = run<Rule, T>(f, p1, {.chunk = 8}), b = run<Rule, T>(f, p2, {.chunk = 8});
    const auto c = run<Rule, T>(f, sum, {.chunk = 8});
    std::vector<double> added(a.r.o.size());
    for (std::size_t i = 0; i < added.size(); ++i) added[i] = a.r.o[i] + b.r.o[i];
    CHECK(rel_err(c.r.o, added) < 10 * tolerance<T>());
  }
}

TEMPLATE_TEST_CASE("decay rules with zero gates reduce to Hebbian (R1)", "[reductions]", float, double) {
  using T = TestType;
  std::mt19937_64 rng(34);
  const auto hebb = make_problem(rng, shape, ref::decay::none);
  ref::problem scalar = hebb, vector = hebb;
  scalar.kind = ref::decay::scalar;
  scalar.g.assign(std::size_t(shape.B) * shape.T * shape.HV, 0.0);
  vector.kind = ref::decay::vector;
  vector.g.assign(scalar.g.size() * shape.K, 0.0);
  for (form f : all_forms) {
    CAPTURE(name(f));
    const auto h = run<la::Hebbian, T>(f, hebb, {.chunk = 8});
    const auto s = run<la::ScalarDecay, T>(f, scalar, {.chunk = 8});
    const auto v = run<la::VectorDecay, T>(f, vector, {.chunk = 8});
    CHECK(rel_err(s.r.o, h.r.o) < tolerance<T>());
    CHECK(rel_err(v.r.o, h.r.o) < tolerance<T>());
    CHECK(rel_err(s.r.s, h.r.s) < tolerance<T>());
    CHECK(rel_err(v.r.s, h.r.s) < tolerance<T>());
  }
}

TEMPLATE_TEST_CASE("vector decay with equal components equals scalar decay (R2)", "[reductions]", float, double) {
  using T = TestType;
  std::mt19937_64 rng(35);
  const auto scalar = make_problem(rng, shape, ref::decay::scalar);
  ref::problem vector = scalar;
  vector.kind = ref::decay::vector;
  vector.g.clear();
  for (double g : scalar.g) vector.g.insert(vector.g.end(), std::size_t(shape.K), g);
  for (form f : all_forms) {
    CAPTURE(name(f));
    const auto s = run<la::ScalarDecay, T>(f, scalar, {.chunk = 8});
    const auto v = run<la::VectorDecay, T>(f, vector, {.chunk = 8});
    CHECK(rel_err(v.r.o, s.r.o) < tolerance<T>());
    CHECK(rel_err(v.r.s, s.r.s) < tolerance<T>());
  }
}

TEST_CASE("a constant per-head gate is a stride-0 view", "[views]") {
  std::mt19937_64 rng(36);
  auto p = make_problem(rng, shape, ref::decay::scalar);
  const std::vector<double> per_head{-0.01, -0.3, -0.05, -1.5};  // [HV]
  for (std::size_t i = 0; i < p.g.size(); ++i) p.g[i] = per_head[i % shape.HV];
  const auto want = ref::run(p);
  std::vector<double> q = p.q, k = p.k, v = p.v, s0 = p.s0, o(want.o.size(), poison);
  la::ScalarDecay::inputs<double> in{.q = la::view(q.data(), shape.B, shape.T, shape.H, shape.K),
                                     .k = la::view(k.data(), shape.B, shape.T, shape.H, shape.K),
                                     .v = la::view(v.data(), shape.B, shape.T, shape.HV, shape.V),
                                     .g = la::view(per_head.data(), {shape.B, shape.T, shape.HV}, {0, 0, 1})};
  la::options<double> opt;
  opt.initial_state = la::view(s0.data(), shape.B, shape.HV, shape.K, shape.V);
  opt.chunk_size = 8;
  la::chunkwise_forward<la::ScalarDecay>(in, la::view(o.data(), shape.B, shape.T, shape.HV, shape.V), opt);
  CHECK(rel_err(o, want.o) < 1e-10);
  std::fill(o.begin(), o.end(), poison);
  la::parallel_forward<la::ScalarDecay>(in, la::view(o.data(), shape.B, shape.T, shape.HV, shape.V), opt);
  CHECK(rel_err(o, want.o) < 1e-10);
}

TEST_CASE("final_state may alias initial_state (state updated in place)", "[state]") {
  std::mt19937_64 rng(37);
  const auto p = make_problem(rng, shape, ref::decay::vector);
  const auto want = ref::run(p);
  for (form f : {form::recurrent, form::parallel, form::chunkwise}) {
    CAPTURE(name(f));
    std::vector<double> q = p.q, k = p.k, v = p.v, g = p.g, state = p.s0, o(want.o.size(), poison);
    la::VectorDecay::inputs<double> in{.q = la::view(q.data(), shape.B, shape.T, shape.H, shape.K),
                                       .k = la::view(k.data(), shape.B, shape.T, shape.H, shape.K),
                                       .v = la::view(v.data(), shape.B, shape.T, shape.HV, shape.V),
                                       .g = la::view(g.data(), shape.B, shape.T, shape.HV, shape.K)};
    la::options<double> opt;
    opt.initial_state = la::view(state.data(), shape.B, shape.HV, shape.K, shape.V);
    opt.final_state = la::view(state.data(), shape.B, shape.HV, shape.K, shape.V);
    opt.chunk_size = 8;
    const auto out = la::view(o.data(), shape.B, shape.T, shape.HV, shape.V);
    if (f == form::recurrent) la::recurrent_forward<la::VectorDecay>(in, out, opt);
    if (f == form::parallel) la::parallel_forward<la::VectorDecay>(in, out, opt);
    if (f == form::chunkwise) la::chunkwise_forward<la::VectorDecay>(in, out, opt);
    CHECK(rel_err(o, want.o) < 1e-10);
    CHECK(rel_err(state, want.s) < 1e-10);
  }
}
