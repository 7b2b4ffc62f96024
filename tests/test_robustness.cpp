// SPDX-License-Identifier: MIT
// Numerically hostile inputs, docs/math.md#equivalences N1, N2, N4, N5: every form must stay
// finite and agree with the float64 reference.
#include "support/catch.hpp"
#include "support/harness.hpp"

using namespace harness;

namespace {
template <class Rule, class T>
void all_forms_match(const ref::problem& p, std::initializer_list<index_t> chunks, bool with_parallel = true) {
  const auto want = ref::run(p);
  for (form f : {form::recurrent, form::parallel}) {
    if (f == form::parallel && !with_parallel) continue;
    CAPTURE(name(f));
    const auto got = run<Rule, T>(f, p);
    CHECK(rel_err(got.r.o, want.o) < tolerance<T>());
    CHECK(rel_err(got.r.s, want.s) < tolerance<T>());
  }
  for (index_t C : chunks) {
    CAPTURE(C);
    const auto got = run<Rule, T>(form::chunkwise, p, {.chunk = C});
    CHECK(rel_err(got.r.o, want.o) < tolerance<T>());
    CHECK(rel_err(got.r.s, want.s) < tolerance<T>());
  }
}
}  // namespace

TEMPLATE_TEST_CASE("N1: log gate -60 per step decays everything within a chunk", "[robustness]", float, double) {
  std::mt19937_64 rng(41);
  const ref::dims d{.B = 1, .T = 150, .H = 2, .HV = 2, .K = 8, .V = 8};
  all_forms_match<la::ScalarDecay, TestType>(make_problem(rng, d, ref::decay::scalar, gates::strong), {16, 64, 256});
  all_forms_match<la::VectorDecay, TestType>(make_problem(rng, d, ref::decay::vector, gates::strong), {16, 64, 256});
}

TEST_CASE("N2: log gate -1e-6 over L = 8192 (global-cumsum precision trap), fp32", "[robustness]") {
  std::mt19937_64 rng(42);
  const ref::dims d{.B = 1, .T = 8192, .H = 1, .HV = 1, .K = 16, .V = 12};
  all_forms_match<la::ScalarDecay, float>(make_problem(rng, d, ref::decay::scalar, gates::weak), {64, 256});
  all_forms_match<la::VectorDecay, float>(make_problem(rng, d, ref::decay::vector, gates::weak), {64});
}

TEST_CASE("N4: Hebbian over L = 16384 with an fp32 state stays within 1e-4", "[robustness]") {
  std::mt19937_64 rng(43);
  const ref::dims d{.B = 1, .T = 16384, .H = 1, .HV = 1, .K = 16, .V = 16};
  all_forms_match<la::Hebbian, float>(make_problem(rng, d, ref::decay::none), {64, 128});
}

TEMPLATE_TEST_CASE("N5: vector decay -2 per step with C = 64 (no exp(-b) overflow)", "[robustness]", float, double) {
  std::mt19937_64 rng(44);
  auto p = make_problem(rng, {.B = 1, .T = 200, .H = 1, .HV = 2, .K = 16, .V = 8}, ref::decay::vector);
  // Mostly -2 per step, with a few dimensions that barely decay, so outputs mix both scales.
  for (std::size_t i = 0; i < p.g.size(); ++i) p.g[i] = (i % 16 < 3) ? -1e-3 : -2.0;
  all_forms_match<la::VectorDecay, TestType>(p, {64, 128, 256});
  const auto got = run<la::VectorDecay, TestType>(form::chunkwise, p, {.chunk = 64});
  for (double x : got.r.o) REQUIRE(std::isfinite(x));
}
