// SPDX-License-Identifier: MIT
// 16-bit inputs on the CPU (Eigen::bfloat16, Eigen::half; float state): every linear rule in
// the recurrent, chunkwise and parallel forms and decode against the float64 reference run on
// the same inputs rounded to the 16-bit type. Outputs are rounded once when stored, so they
// match to the type's rounding (bf16 2^-8, half 2^-11 relative); the float state to 1e-4.
#include <Eigen/Core>

#include "support/cases.hpp"
#include "support/catch.hpp"

using namespace harness;

namespace {
template <class X>
void round_to(std::vector<double>& v) {
  for (double& e : v) e = static_cast<double>(static_cast<X>(e));
}

template <class X>
ref::problem rounded(ref::problem p) {
  for (auto* v : {&p.q, &p.k, &p.v, &p.g, &p.beta, &p.s0}) round_to<X>(*v);
  return p;
}

template <class X>
double output_tolerance() {
  return std::is_same_v<X, Eigen::bfloat16> ? 1e-2 : 2e-3;
}

template <class Rule, class X>
void check_rule(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const ref::dims d{.B = 2, .T = 45, .H = 2, .HV = 4, .K = 16, .V = 12};
  auto p = make_problem(rng, d, spec_of<Rule>(), gates::mild);
  round_to<float>(p.s0);  // the state is float
  p = rounded<X>(p);
  const auto want = ref::run(p);
  for (form f : {form::recurrent, form::chunkwise, form::parallel, form::decode}) {
    CAPTURE(Rule::name, name(f));
    const auto got = run<Rule, X>(f, p, {.chunk = 16});
    CHECK(rel_err(got.r.o, want.o) < output_tolerance<X>());
    if (f != form::decode) CHECK(rel_err(got.r.s, want.s) < 1e-4);
  }
}
}  // namespace

TEMPLATE_TEST_CASE("bf16 and half inputs: every linear rule and form matches float64 on the rounded inputs",
                   "[forms][half]", Eigen::bfloat16, Eigen::half) {
  check_rule<la::Hebbian, TestType>(1);
  check_rule<la::ScalarDecay, TestType>(2);
  check_rule<la::VectorDecay, TestType>(3);
  check_rule<la::Delta, TestType>(4);
  check_rule<la::GatedDelta, TestType>(5);
  check_rule<la::Longhorn, TestType>(6);
  check_rule<la::KDA, TestType>(7);
  check_rule<la::LonghornDiagonal, TestType>(8);
}
