// SPDX-License-Identifier: MIT
// Every form of every rule against the float64 reference: docs/math.md#equivalences T1, T3, T4, T5,
// T6, on odd shapes (T not a multiple of C, K != V, grouped value heads) and strided views.
#include "support/catch.hpp"
#include "support/cases.hpp"

using namespace harness;

namespace {
const std::vector<ref::dims> odd_shapes = {
    {.B = 2, .T = 37, .H = 2, .HV = 4, .K = 8, .V = 6},
    {.B = 1, .T = 100, .H = 3, .HV = 3, .K = 5, .V = 7},
    {.B = 3, .T = 71, .H = 1, .HV = 3, .K = 12, .V = 16},
};
}  // namespace

TEMPLATE_LIST_TEST_CASE("recurrent, parallel and decode match the reference (T3, T5)", "[forms]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(11);
  for (const auto& d : odd_shapes) {
    const auto p = make_problem(rng, d, spec_of<Rule>());
    const auto want = ref::run(p);
    for (form f : {form::recurrent, form::parallel, form::decode}) {
      CAPTURE(name(f), d.B, d.T, d.H, d.HV, d.K, d.V);
      expect_matches<T>(run<Rule, T>(f, p), want);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("chunkwise matches the reference for every chunk size (T1)", "[forms]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(12);
  for (const auto& d : odd_shapes) {
    const auto p = make_problem(rng, d, spec_of<Rule>());
    const auto want = ref::run(p);
    for (index_t C : {1, 2, 3, 4, 8, 16, 17, 32, 37, 64, 100, 256}) {
      CAPTURE(C, d.B, d.T, d.H, d.HV, d.K, d.V);
      expect_matches<T>(run<Rule, T>(form::chunkwise, p, {.chunk = C}), want);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("forms read strided, padded, head-first views (T1, T3)", "[forms][views]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(13);
  const auto p = make_problem(rng, odd_shapes[0], spec_of<Rule>());
  const auto want = ref::run(p);
  for (form f : all_forms) {
    CAPTURE(name(f));
    expect_matches<T>(run<Rule, T>(f, p, {.chunk = 16, .lay = layout::strided}), want);
  }
}

TEMPLATE_LIST_TEST_CASE("production-size shapes with a short last chunk", "[forms]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(14);
  const auto p = make_problem(rng, {.B = 1, .T = 300, .H = 1, .HV = 2, .K = 64, .V = 128}, spec_of<Rule>());
  const auto want = ref::run(p);
  for (form f : {form::recurrent, form::parallel}) {
    CAPTURE(name(f));
    expect_matches<T>(run<Rule, T>(f, p), want);
  }
  for (index_t C : {16, 64, 128}) {
    CAPTURE(C);
    expect_matches<T>(run<Rule, T>(form::chunkwise, p, {.chunk = C}), want);
  }
}

TEMPLATE_LIST_TEST_CASE("state carry: two calls equal one (T4)", "[forms][state]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(15);
  const auto& d = odd_shapes[0];
  const auto p = make_problem(rng, d, spec_of<Rule>());
  const auto want = ref::run(p);
  for (form f : all_forms) {
    for (int h : {16, 21}) {  // aligned and not aligned to C = 8
      CAPTURE(name(f), h);
      check_state_carry<T>(want, d, p.s0, h, [&](int t0, int t1, const std::vector<double>& s0) {
        return run<Rule, T>(f, slice_time(p, t0, t1, s0), {.chunk = 8});
      });
    }
  }
}

TEMPLATE_LIST_TEST_CASE("without initial state the start is zero and the final state is optional", "[forms][state]",
                        all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(16);
  const auto p = make_problem(rng, odd_shapes[1], spec_of<Rule>(), gates::mild, /*with_s0=*/false);
  const auto want = ref::run(p);
  for (form f : all_forms) {
    CAPTURE(name(f));
    expect_matches<T>(run<Rule, T>(f, p, {.chunk = 16}), want);
    const auto no_state = run<Rule, T>(f, p, {.chunk = 16, .want_state = false});
    CHECK(rel_err(no_state.r.o, want.o) < tolerance<T>());
  }
}

TEMPLATE_LIST_TEST_CASE("decode: one step from S_{L-1} gives the last row (T5)", "[forms][decode]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(17);
  const auto& d = odd_shapes[0];
  const auto p = make_problem(rng, d, spec_of<Rule>());
  const auto want = ref::run(p);
  const auto prefix = run<Rule, T>(form::chunkwise, slice_time(p, 0, d.T - 1, p.s0), {.chunk = 16});
  const auto step = run<Rule, T>(form::decode, slice_time(p, d.T - 1, d.T, prefix.r.s));
  CHECK(rel_err(step.r.o, rows(want.o, d, d.T - 1, d.T)) < tolerance<T>());
  CHECK(rel_err(step.r.s, want.s) < tolerance<T>());
}

TEMPLATE_LIST_TEST_CASE("packed variable-length batches equal separate runs (T6)", "[forms][varlen]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(18);
  // Sequences of length 5, 0, 17, 18, 1 and 40: empty, single-token and multi-chunk ones.
  const std::vector<std::int64_t> cu{0, 5, 5, 22, 40, 41, 81};
  const auto p = make_problem(rng, {.B = 1, .T = 81, .H = 2, .HV = 4, .K = 6, .V = 5}, spec_of<Rule>(), gates::mild,
                              true, cu);
  const auto want = ref::run(p);
  for (form f : {form::recurrent, form::parallel, form::chunkwise}) {
    CAPTURE(name(f));
    const auto packed = run<Rule, T>(f, p, {.chunk = 8});
    expect_matches<T>(packed, want);
    for (std::size_t n = 0; n + 1 < cu.size(); ++n) {  // each sequence alone, with its own S0
      CAPTURE(n);
      ref::problem one = slice_time(p, int(cu[n]), int(cu[n + 1]), {});
      one.cu.clear();
      const std::size_t per_seq = std::size_t(p.d.HV) * p.d.K * p.d.V;
      one.s0.assign(p.s0.begin() + n * per_seq, p.s0.begin() + (n + 1) * per_seq);
      const auto alone = run<Rule, T>(f, one, {.chunk = 8});
      CHECK(rel_err(alone.r.o, rows(packed.r.o, p.d, int(cu[n]), int(cu[n + 1]))) < tolerance<T>());
      CHECK(rel_err(alone.r.s, std::vector<double>(packed.r.s.begin() + n * per_seq,
                                                   packed.r.s.begin() + (n + 1) * per_seq)) < tolerance<T>());
    }
  }
}

TEMPLATE_LIST_TEST_CASE("results do not depend on the thread count", "[forms][threads]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(19);
  const auto p = make_problem(rng, {.B = 3, .T = 45, .H = 2, .HV = 4, .K = 8, .V = 8}, spec_of<Rule>());
  for (form f : all_forms) {
    CAPTURE(name(f));
    const auto one = run<Rule, T>(f, p, {.chunk = 16, .threads = 1});
    for (int threads : {2, 3, 0}) {
      CAPTURE(threads);
      const auto many = run<Rule, T>(f, p, {.chunk = 16, .threads = threads});
      CHECK(many.r.o == one.r.o);
      CHECK(many.r.s == one.r.s);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("fewer sequences x heads than threads: same result on any thread count", "[forms][threads]",
                        all_cases) {
  // One or two (sequence, value head) tasks on up to 3 threads: the delta rules' chunks then
  // go across threads (chunk-local work in parallel, then the state pass). 10-11 chunks of 16
  // span several windows of chunks; packed batches pair a long sequence with an empty or a
  // one-token one.
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(21);
  const std::vector<ref::problem> problems = {
      make_problem(rng, {.B = 1, .T = 150, .H = 1, .HV = 1, .K = 9, .V = 70}, spec_of<Rule>()),
      make_problem(rng, {.B = 1, .T = 170, .H = 1, .HV = 2, .K = 6, .V = 5}, spec_of<Rule>()),
      make_problem(rng, {.B = 1, .T = 170, .H = 1, .HV = 1, .K = 6, .V = 66}, spec_of<Rule>(), gates::mild, true,
                   {0, 0, 170}),
      make_problem(rng, {.B = 1, .T = 170, .H = 1, .HV = 1, .K = 6, .V = 66}, spec_of<Rule>(), gates::mild, true,
                   {0, 1, 170}),
  };
  for (const auto& p : problems) {
    CAPTURE(p.d.T, p.d.HV, p.d.V, p.cu.size());
    const auto want = ref::run(p);
    const auto one = run<Rule, T>(form::chunkwise, p, {.chunk = 16, .threads = 1});
    expect_matches<T>(one, want);
    for (int threads : {2, 3, 0}) {
      CAPTURE(threads);
      const auto many = run<Rule, T>(form::chunkwise, p, {.chunk = 16, .threads = threads});
      CHECK(many.r.o == one.r.o);
      CHECK(many.r.s == one.r.s);
      CHECK(many.padding_ok);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("a given options.scale multiplies q", "[forms]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(20);
  auto p = make_problem(rng, odd_shapes[0], spec_of<Rule>());
  p.scale = 0.37;
  const auto want = ref::run(p);
  for (form f : all_forms) {
    CAPTURE(name(f));
    expect_matches<T>(run<Rule, T>(f, p, {.chunk = 16, .explicit_scale = true}), want);
  }
}
