// SPDX-License-Identifier: MIT
// Hostile numerics: hard resets (log gates of -inf), single huge gates beside small ones, key
// norms from 1e-20 to 1e20, beta at 0 and 2, very long sequences, denormals; every form in float and
// double against the float64 reference, never NaN. Plus the validation holes found with them:
// a scale that is finite only as a double, extents and strides whose reach overflows.
#include "support/catch.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/cases.hpp"

using namespace harness;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

/// max|got - want| / max(|want|, |s0|): the error of a final state measured against the larger
/// of it and the initial state (see state_scale in expect_all_forms).
double rel_err_floor(const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& s0) {
  double s = 0;
  for (double e : s0) s = std::max(s, std::abs(e));
  for (double e : want) s = std::max(s, std::abs(e));
  double diff = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(got.at(i) - want[i]);
    diff = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(diff, d);
  }
  return diff / std::max(s, 1e-300);
}

/// Every form of the rule on p (chunkwise at each chunk size), compared with the reference.
/// `state_vs_start`: measure final states against the larger of them and the initial state
/// (a chunk that nearly erases its start state computes the small remainder as a difference of
/// terms of the start state's size, so its error is relative to that size; the recurrence
/// erases token by token and stays relative to the remainder).
template <class Rule, class T>
void expect_all_forms(const ref::problem& p, std::initializer_list<index_t> chunks = {16, 64}, double tol = tolerance<T>(),
                      bool state_vs_start = false) {
  const ref::result want = ref::run(p);
  for (form f : all_forms) {
    for (index_t C : chunks) {
      if (f != form::chunkwise && C != *chunks.begin()) continue;
      CAPTURE(name(f), C);
      config c;
      c.chunk = C;
      const outcome got = run<Rule, T>(f, p, c);
      CHECK(rel_err(got.r.o, want.o) <= tol);
      if (state_vs_start && (f == form::parallel || f == form::chunkwise))
        CHECK(rel_err_floor(got.r.s, want.s, p.s0) <= tol);
      else
        CHECK(rel_err(got.r.s, want.s) <= tol);
    }
  }
}

template <class Rule>
ref::problem gated_problem(std::mt19937_64& rng, ref::dims d) {
  return make_problem(rng, d, spec_of<Rule>(), gates::mild);
}

}  // namespace

using gated_cases = std::tuple<rule_case<la::ScalarDecay, float>, rule_case<la::ScalarDecay, double>,
                               rule_case<la::VectorDecay, float>, rule_case<la::VectorDecay, double>,
                               rule_case<la::GatedDelta, float>, rule_case<la::GatedDelta, double>>;

TEMPLATE_LIST_TEST_CASE("hard resets: log gates of -inf zero the state in every form", "[hostile]", gated_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(11);
  const ref::dims d{.B = 2, .T = 131, .H = 1, .HV = 2, .K = 6, .V = 5};
  ref::problem p = gated_problem<Rule>(rng, d);
  const std::size_t per_token = Rule::decay == la::decay_kind::vector ? std::size_t(d.K) : 1;
  // Resets at a chunk's first token, inside chunks, twice in a row, and at the very end.
  for (int b = 0; b < d.B; ++b)
    for (int t : {0, 16, 37, 38, 64, 100, 130})
      for (int hv = 0; hv < d.HV; ++hv)
        for (std::size_t i = 0; i < per_token; ++i)
          if (per_token == 1 || i % 2 == 0) p.g[p.tok_at(b, t, hv) * per_token + i] = -inf;
  expect_all_forms<Rule, T>(p);
  // Every gate -inf: each output is that token's own write read by its query.
  for (auto& e : p.g) e = -inf;
  expect_all_forms<Rule, T>(p);
}

TEMPLATE_LIST_TEST_CASE("single huge gates beside small ones keep float chunkwise at fp64 accuracy", "[hostile]",
                        gated_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(12);
  const ref::dims d{.B = 1, .T = 300, .H = 1, .HV = 1, .K = 8, .V = 7};
  for (double huge : {-1e3, -1e4, -1e5}) {
    CAPTURE(huge);
    ref::problem p = gated_problem<Rule>(rng, d);
    for (auto& e : p.g) e = -0.02;
    const std::size_t per_token = Rule::decay == la::decay_kind::vector ? std::size_t(d.K) : 1;
    for (int t = 40; t < d.T; t += 64)
      for (std::size_t i = 0; i < per_token; ++i) p.g[std::size_t(t) * per_token + i] = huge;
    expect_all_forms<Rule, T>(p, {16, 64, 256});
  }
}

using key_norm_cases = std::tuple<rule_case<la::Longhorn, float>, rule_case<la::Longhorn, double>,
                                  rule_case<la::NLMS, float>, rule_case<la::NLMS, double>>;

TEMPLATE_LIST_TEST_CASE("any key norm float can hold: Longhorn and NLMS stay at fp64 accuracy", "[hostile]",
                        key_norm_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(13);
  const ref::dims d{.B = 1, .T = 150, .H = 1, .HV = 2, .K = 7, .V = 5};
  for (double key_scale : {1e-20, 1e-10, 1e-3, 1e3, 1e10, 1e20}) {
    CAPTURE(key_scale);
    ref::problem p = make_problem(rng, d, spec_of<la::Longhorn>(), gates::mild);
    for (auto& e : p.k) e *= key_scale;
    if constexpr (std::is_same_v<Rule, la::NLMS>)  // NLMS = Longhorn with delta = 1 / eps_k
      for (auto& e : p.beta) e = 1.0 / 1e-6;
    expect_all_forms<Rule, T>(p, {16, 64, 256}, tolerance<T>(), /*state_vs_start=*/true);
  }
}

using delta_cases = std::tuple<rule_case<la::Delta, float>, rule_case<la::Delta, double>,
                               rule_case<la::GatedDelta, float>, rule_case<la::GatedDelta, double>>;

TEMPLATE_LIST_TEST_CASE("beta at 0 and at 2 (the negative-eigenvalue edge)", "[hostile]", delta_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(14);
  const ref::dims d{.B = 1, .T = 97, .H = 1, .HV = 1, .K = 6, .V = 4};
  for (double beta : {0.0, 2.0}) {
    CAPTURE(beta);
    ref::problem p = make_problem(rng, d, spec_of<Rule>(), gates::mild);
    for (auto& e : p.beta) e = beta;
    expect_all_forms<Rule, T>(p);
  }
}

TEMPLATE_LIST_TEST_CASE("long sequences: 100,000 tokens with slow gates", "[hostile]", gated_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(15);
  const ref::dims d{.B = 1, .T = 100000, .H = 1, .HV = 1, .K = 4, .V = 4};
  ref::problem p = make_problem(rng, d, spec_of<Rule>(), gates::mild);
  for (auto& e : p.g) e = -1e-5;
  const ref::result want = ref::run(p);
  // The chunkwise form sums each chunk's writes in block products: fp64 accuracy.
  config c;
  c.threads = 2;
  const outcome chunk = run<Rule, T>(form::chunkwise, p, c);
  CHECK(rel_err(chunk.r.o, want.o) <= tolerance<T>());
  // The recurrent form rounds the state once per token: its error grows with T (README,
  // numerical regimes); float stays within 1e-2 here, double within 1e-10.
  const outcome rec = run<Rule, T>(form::recurrent, p, c);
  CHECK(rel_err(rec.r.o, want.o) <= (std::is_same_v<T, float> ? 1e-2 : 1e-10));
}

TEST_CASE("a scale that is finite only as a double is rejected for float inputs", "[hostile][validation]") {
  std::vector<float> q(2 * 4, 0.5f), o(2 * 4, std::nanf(""));
  la::Hebbian::inputs<float> in{.q = la::view(q.data(), 1, 2, 1, 4), .k = la::view(q.data(), 1, 2, 1, 4),
                                .v = la::view(q.data(), 1, 2, 1, 4)};
  la::options<float> opt;
  opt.scale = 1e39;
  std::string msg;
  try {
    la::chunkwise_forward<la::Hebbian>(in, la::view(o.data(), 1, 2, 1, 4), opt);
  } catch (const la::error& e) {
    msg = e.what();
  }
  CHECK(msg.find("'options.scale'") != std::string::npos);
  for (float e : o) CHECK(std::isnan(e));
  opt.scale = 1e30;  // representable: accepted
  la::chunkwise_forward<la::Hebbian>(in, la::view(o.data(), 1, 2, 1, 4), opt);
  for (float e : o) CHECK(std::isfinite(e));
}

TEST_CASE("extents and strides whose reach overflows the index are rejected up front", "[hostile][validation]") {
  const index_t big = index_t(1) << 32;
  std::vector<float> x(64, 0.5f), o(64, std::nanf(""));
  auto expect_overflow = [&](const la::Hebbian::inputs<float>& in, la::tensor_view<float, 4> out, const char* arg) {
    std::string msg;
    try {
      la::recurrent_forward<la::Hebbian>(in, out);
    } catch (const la::error& e) {
      msg = e.what();
    }
    INFO(msg);
    CHECK(msg.find(std::string("'") + arg + "'") != std::string::npos);
    CHECK(msg.find("overflows") != std::string::npos);
  };
  // [2^32, 2^32, 1, 1]: 2^64 elements wrap to 0 (null pointers).
  la::Hebbian::inputs<float> in{.q = la::view(static_cast<const float*>(nullptr), {big, big, 1, 1}, {big, 1, 1, 1}),
                                .k = la::view(static_cast<const float*>(nullptr), {big, big, 1, 1}, {big, 1, 1, 1}),
                                .v = la::view(static_cast<const float*>(nullptr), {big, big, 1, 1}, {big, 1, 1, 1})};
  expect_overflow(in, la::view(static_cast<float*>(nullptr), {big, big, 1, 1}, {big, 1, 1, 1}), "q");
  // Stride-0 views with real data: small count, but the output's strides reach past 2^63.
  la::Hebbian::inputs<float> in2{.q = la::view(static_cast<const float*>(x.data()), {2, 2, 1, 4}, {0, 0, 0, 1}),
                                 .k = la::view(static_cast<const float*>(x.data()), {2, 2, 1, 4}, {0, 0, 0, 1}),
                                 .v = la::view(static_cast<const float*>(x.data()), {2, 2, 1, 4}, {0, 0, 0, 1})};
  expect_overflow(in2, la::view(o.data(), {2, 2, 1, 4}, {index_t(1) << 62, 4, 4, 1}), "out");
  for (float e : o) CHECK(std::isnan(e));
}

TEMPLATE_LIST_TEST_CASE("denormals: states decaying through the subnormal range, subnormal inputs beside normal ones",
                        "[hostile]", gated_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(16);
  const ref::dims d{.B = 2, .T = 150, .H = 1, .HV = 2, .K = 8, .V = 6};
  ref::problem p = make_problem(rng, d, spec_of<Rule>(), gates::mild);
  const double tiny = std::is_same_v<T, float> ? 1e-40 : 1e-310;  // subnormal in T
  // Gates of -5: a state of size 1 passes through T's subnormal range within the sequence.
  for (auto& e : p.g) e = -5.0;
  // Every third value and every fifth initial-state entry subnormal; keys and queries normal.
  for (std::size_t i = 0; i < p.v.size(); i += 3) p.v[i] = tiny * (1 + double(i % 7));
  for (std::size_t i = 0; i < p.s0.size(); i += 5) p.s0[i] = tiny;
  const ref::result want = ref::run(p);
  for (form f : all_forms) {
    CAPTURE(name(f));
    const outcome got = run<Rule, T>(f, p, {.chunk = 16});
    for (double x : got.r.o) REQUIRE(std::isfinite(x));
    // Subnormal contributions lie far below the tolerance of the normal ones (flush-to-zero is
    // allowed to drop them): the outputs and states match float64 relative to their scale.
    CHECK(rel_err(got.r.o, want.o) <= tolerance<T>());
    CHECK(rel_err(got.r.s, want.s) <= tolerance<T>());
  }
}
