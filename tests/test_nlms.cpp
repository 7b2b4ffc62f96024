// SPDX-License-Identifier: MIT
// NLMS (docs/math.md#nlms): every form against the float64 delta-rule reference with
// beta_t = 1/(||k_t||^2 + eps_k) computed here, and R6 (Longhorn delta -> infinity == NLMS,
// S_t k_t = v_t).
#include "support/catch.hpp"
#include "support/harness.hpp"

using namespace harness;

namespace {
constexpr double eps_k = 1e-6;  // the rule's default

/// A problem for NLMS: raw (unnormalised) keys, and in `beta` the step the rule must use.
ref::problem nlms_problem(std::mt19937_64& rng, ref::dims d, std::vector<std::int64_t> cu = {}) {
  auto p = make_problem(rng, d, rule_spec{ref::decay::none, ref::update::delta}, gates::mild, true, std::move(cu));
  std::normal_distribution<double> normal;
  for (auto& e : p.k) e = normal(rng);  // make_problem normalised them; NLMS needs no normalisation
  for (int b = 0; b < d.B; ++b)
    for (int t = 0; t < d.T; ++t)
      for (int hv = 0; hv < d.HV; ++hv) {
        double kk = 0;
        for (int i = 0; i < d.K; ++i) kk += std::pow(p.k[p.qk_at(b, t, hv / (d.HV / d.H), i)], 2);
        p.beta[p.tok_at(b, t, hv)] = 1.0 / (kk + eps_k);
      }
  return p;
}
}  // namespace

TEMPLATE_TEST_CASE("NLMS: every form == float64 reference (odd shapes, grouped heads, layouts)", "[nlms]", float,
                   double) {
  std::mt19937_64 rng(701);
  const auto p = nlms_problem(rng, {.B = 2, .T = 37, .H = 2, .HV = 6, .K = 7, .V = 5});
  const auto want = ref::run(p);
  for (form f : all_forms) {
    for (index_t C : {1, 5, 16, 64}) {
      if (f != form::chunkwise && C != 16) continue;
      for (layout lay : {layout::contiguous, layout::strided}) {
        CAPTURE(name(f), C, int(lay));
        const auto got = run<la::NLMS, TestType>(f, p, {.chunk = C, .lay = lay});
        CHECK(rel_err(got.r.o, want.o) < tolerance<TestType>());
        CHECK(rel_err(got.r.s, want.s) < tolerance<TestType>());
        CHECK(got.padding_ok);
      }
    }
  }
}

TEMPLATE_TEST_CASE("NLMS: packed variable-length batch (empty and one-token sequences)", "[nlms]", float, double) {
  std::mt19937_64 rng(702);
  const auto p = nlms_problem(rng, {.B = 1, .T = 40, .H = 1, .HV = 2, .K = 9, .V = 4}, {0, 0, 1, 18, 40});
  const auto want = ref::run(p);
  for (form f : {form::recurrent, form::parallel, form::chunkwise}) {
    CAPTURE(name(f));
    const auto got = run<la::NLMS, TestType>(f, p, {.chunk = 8});
    CHECK(rel_err(got.r.o, want.o) < tolerance<TestType>());
    CHECK(rel_err(got.r.s, want.s) < tolerance<TestType>());
  }
}

TEST_CASE("R6: Longhorn with delta = 1e9 == NLMS, and NLMS stores v_t (S_t k_t = v_t)", "[nlms]") {
  std::mt19937_64 rng(703);
  const ref::dims d{.B = 2, .T = 29, .H = 1, .HV = 2, .K = 6, .V = 3};
  const auto p = nlms_problem(rng, d);
  auto longhorn = p;
  longhorn.rule = ref::update::longhorn;
  std::fill(longhorn.beta.begin(), longhorn.beta.end(), 1e9);
  for (form f : all_forms) {
    CAPTURE(name(f));
    const auto n = run<la::NLMS, double>(f, p, {.chunk = 8});
    const auto l = run<la::Longhorn, double>(f, longhorn, {.chunk = 8});
    CHECK(rel_err(n.r.o, l.r.o) < 1e-6);
    CHECK(rel_err(n.r.s, l.r.s) < 1e-6);
    std::vector<double> sk, v;  // S_T k_T and v_T per sequence and head
    for (int b = 0; b < d.B; ++b)
      for (int hv = 0; hv < d.HV; ++hv)
        for (int j = 0; j < d.V; ++j) {
          double acc = 0;
          for (int i = 0; i < d.K; ++i) acc += n.r.s[p.s_at(b, hv, i, j)] * p.k[p.qk_at(b, d.T - 1, 0, i)];
          sk.push_back(acc);
          v.push_back(p.v[p.v_at(b, d.T - 1, hv, j)]);
        }
    CHECK(rel_err(sk, v) < 1e-5);
  }
}

TEST_CASE("NLMS: zero keys leave the state unchanged and stay finite, eps_k is validated", "[nlms][robustness]") {
  std::mt19937_64 rng(704);
  auto p = nlms_problem(rng, {.B = 1, .T = 20, .H = 1, .HV = 1, .K = 4, .V = 3});
  for (int t = 3; t < 9; ++t)
    for (int i = 0; i < 4; ++i) p.k[p.qk_at(0, t, 0, i)] = 0.0;
  for (int t = 3; t < 9; ++t) p.beta[p.tok_at(0, t, 0)] = 1.0 / eps_k;
  const auto want = ref::run(p);
  for (form f : all_forms) {
    CAPTURE(name(f));
    const auto got = run<la::NLMS, float>(f, p, {.chunk = 4});
    CHECK(rel_err(got.r.o, want.o) < 1e-4);
  }
  std::vector<float> x(4 * 4, 1.0f), o(4 * 3);
  la::NLMS::inputs<float> in{.q = la::view(x.data(), 1, 4, 1, 4), .k = la::view(x.data(), 1, 4, 1, 4),
                             .v = la::view(x.data(), 1, 4, 1, 3), .eps_k = 0.0};
  std::string msg;
  try {
    la::recurrent_forward<la::NLMS>(in, la::view(o.data(), 1, 4, 1, 3));
  } catch (const la::error& e) {
    msg = e.what();
  }
  CHECK(msg.find("'eps_k'") != std::string::npos);
  CHECK(msg.find("> 0") != std::string::npos);
}
