// SPDX-License-Identifier: MIT
// The backward pass (docs/backward.md): every rule x backward form against central finite
// differences of the float64 reference (directional derivatives along random directions, one
// input at a time and all at once, L = <grad_out, out> + <grad_final_state, final state>), on
// odd shapes (T not a multiple of the chunk, K != V, grouped value heads), packed batches with
// carried states and hard cases (strong gates, gates exactly 0, beta up to 2, beta exactly 0,
// unnormalised keys); chunkwise_backward against recurrent_backward in float and double; bad calls;
// independence of the thread count.
#include "support/catch.hpp"
#include "support/backward_harness.hpp"

#include <limits>

using namespace harness;

namespace {

/// Directional derivatives of the reference along random directions: each input alone, then
/// all at once.
template <class Rule>
void expect_finite_differences(bform f, const ref::problem& p, std::mt19937_64& rng, const bconfig& c = {}) {
  const seeds s = make_seeds(rng, p);
  const gradients g = run_backward<Rule, double>(f, p, s, c);
  CHECK(g.padding_ok);
  const auto slots = inputs_of(p);
  for (const input_slot& in : slots) {
    const directional d = check_direction(p, s, g, {in}, rng);
    CAPTURE(in.name, d.analytic, d.numeric, d.scale, d.noise);
    CHECK(d.error() < 1e-6);
  }
  const directional all = check_direction(p, s, g, slots, rng);
  CAPTURE(all.analytic, all.numeric, all.scale);
  CHECK(all.error() < 1e-6);
}

const ref::dims odd{.B = 2, .T = 13, .H = 2, .HV = 4, .K = 5, .V = 3};

}  // namespace

#define LINEAR_RULES \
  la::Hebbian, la::ScalarDecay, la::VectorDecay, la::Delta, la::GatedDelta, la::Longhorn, la::NLMS, la::KDA

TEMPLATE_TEST_CASE("backward == finite differences: odd shapes, grouped heads, both states", "[backward]",
                   LINEAR_RULES) {
  using Rule = TestType;
  for (bform f : {bform::recurrent, bform::chunkwise}) {
    std::mt19937_64 rng(901);
    for (index_t C : {1, 4, 16}) {
      CAPTURE(name(f), C);
      expect_finite_differences<Rule>(f, backward_problem<Rule>(rng, odd), rng, {.chunk = C});
    }
    CAPTURE(name(f));
    // Without an initial state; strided views.
    expect_finite_differences<Rule>(f, backward_problem<Rule>(rng, odd, gates::mild, false), rng,
                                    {.chunk = 4, .lay = layout::strided});
  }
}

TEMPLATE_TEST_CASE("backward == finite differences: packed batch with carried states", "[backward][varlen]",
                   LINEAR_RULES) {
  using Rule = TestType;
  for (bform f : {bform::recurrent, bform::chunkwise}) {
    CAPTURE(name(f));
    std::mt19937_64 rng(902);
    const auto p = backward_problem<Rule>(rng, {.B = 1, .T = 23, .H = 1, .HV = 2, .K = 6, .V = 4}, gates::mild, true,
                                          {0, 7, 7, 16, 17, 23});
    expect_finite_differences<Rule>(f, p, rng, {.chunk = 5});
  }
}

TEMPLATE_TEST_CASE("backward == finite differences: strong gates, zero gates, large steps", "[backward][robust]",
                   LINEAR_RULES) {
  using Rule = TestType;
  for (bform f : {bform::recurrent, bform::chunkwise}) {
    std::mt19937_64 rng(903);
    for (gates gm : {gates::strong, gates::zero}) {
      CAPTURE(name(f), int(gm));
      expect_finite_differences<Rule>(f, backward_problem<Rule>(rng, odd, gm, true, {}, steps::large), rng,
                                      {.chunk = 4});
    }
  }
}

TEMPLATE_TEST_CASE("backward == finite differences: write strengths of exactly 0", "[backward][robust]", la::Delta,
                   la::GatedDelta, la::Longhorn, la::KDA) {
  // A token with beta = 0 (Longhorn: delta = 0) writes nothing, but dbeta there is not 0: it is
  // the write's first-order effect, which the backward must not lose to the zero factor.
  using Rule = TestType;
  for (bform f : {bform::recurrent, bform::chunkwise}) {
    CAPTURE(name(f));
    std::mt19937_64 rng(905);
    auto p = backward_problem<Rule>(rng, odd, gates::strong, true, {}, steps::large);
    for (std::size_t i = 0; i < p.beta.size(); i += 3) p.beta[i] = 0.0;
    expect_finite_differences<Rule>(f, p, rng, {.chunk = 4});
  }
}

TEMPLATE_TEST_CASE("backward == finite differences: chunks of several 16-row blocks", "[backward]", LINEAR_RULES) {
  using Rule = TestType;
  for (bform f : {bform::recurrent, bform::chunkwise}) {
    std::mt19937_64 rng(906);
    for (index_t C : {32, 64}) {
      CAPTURE(name(f), C);
      const auto p = backward_problem<Rule>(rng, {.B = 1, .T = 77, .H = 1, .HV = 2, .K = 6, .V = 5});
      expect_finite_differences<Rule>(f, p, rng, {.chunk = C});
    }
  }
}

TEMPLATE_TEST_CASE("backward == finite differences through options::normalize_qk (unnormalised q and k)",
                   "[backward][qk_norm]", LINEAR_RULES) {
  using Rule = TestType;
  for (bform f : {bform::recurrent, bform::chunkwise}) {
    std::mt19937_64 rng(907);
    CAPTURE(name(f));
    auto p = backward_problem<Rule>(rng, odd, gates::mild, true, {}, steps::large);
    // rows of very different lengths, so the normalisation's gradient matters (not shorter than
    // 0.1: the difference step is absolute, and on shorter rows its truncation error shows)
    scale_rows(p.q, odd.K, rng, -1.0, 1.5);
    scale_rows(p.k, odd.K, rng, -1.0, 1.5);
    p.normalize_qk = true;  // the reference normalises, so its finite differences include that step
    expect_finite_differences<Rule>(f, p, rng, {.chunk = 4, .lay = layout::strided, .normalize_qk = true});
    // A packed batch, two threads.
    auto packed = backward_problem<Rule>(rng, {.B = 1, .T = 23, .H = 1, .HV = 2, .K = 6, .V = 4}, gates::mild, true,
                                         {0, 7, 7, 16, 17, 23});
    for (double& e : packed.k) e *= 3.0;
    packed.normalize_qk = true;
    expect_finite_differences<Rule>(f, packed, rng, {.chunk = 5, .threads = 2, .normalize_qk = true});
  }
}

// ---- bad calls ------------------------------------------------------------------------------

namespace {

constexpr float fnan = std::numeric_limits<float>::quiet_NaN();
constexpr index_t vB = 2, vT = 9, vH = 2, vHV = 4, vK = 4, vV = 3;

/// Valid buffers for a GatedDelta backward call; every output NaN.
struct bad_call_data {
  std::vector<float> q, k, v, g, beta, s0, dout, ds1;
  std::vector<float> dq, dk, dv, dg, dbeta, ds0, s1;
  bad_call_data() {
    std::mt19937 rng(5);
    std::normal_distribution<float> n;
    auto rnd = [&](std::size_t size) {
      std::vector<float> x(size);
      for (auto& e : x) e = n(rng);
      return x;
    };
    q = rnd(vB * vT * vH * vK), k = rnd(vB * vT * vH * vK), v = rnd(vB * vT * vHV * vV);
    g = rnd(vB * vT * vHV), beta = rnd(vB * vT * vHV);
    for (auto& e : g) e = -std::abs(e);
    for (auto& e : beta) e = std::abs(e);
    s0 = rnd(vB * vHV * vK * vV), ds1 = rnd(vB * vHV * vK * vV), dout = rnd(vB * vT * vHV * vV);
    dq.assign(q.size(), fnan), dk.assign(k.size(), fnan), dv.assign(v.size(), fnan);
    dg.assign(g.size(), fnan), dbeta.assign(beta.size(), fnan), ds0.assign(s0.size(), fnan), s1 = ds0;
  }
  la::GatedDelta::inputs<float> in() const {
    return {.q = la::view(q.data(), vB, vT, vH, vK), .k = la::view(k.data(), vB, vT, vH, vK),
            .v = la::view(v.data(), vB, vT, vHV, vV), .g = la::view(g.data(), vB, vT, vHV),
            .beta = la::view(beta.data(), vB, vT, vHV)};
  }
  la::GatedDelta::gradients<float> grads() {
    return {.dq = la::view(dq.data(), vB, vT, vH, vK), .dk = la::view(dk.data(), vB, vT, vH, vK),
            .dv = la::view(dv.data(), vB, vT, vHV, vV), .dg = la::view(dg.data(), vB, vT, vHV),
            .dbeta = la::view(dbeta.data(), vB, vT, vHV)};
  }
  la::tensor_view<const float, 4> grad_out() const { return la::view(dout.data(), vB, vT, vHV, vV); }
  la::backward_options<float> opts() {
    la::backward_options<float> opt;
    opt.initial_state = la::view(s0.data(), vB, vHV, vK, vV);
    opt.grad_final_state = la::view(ds1.data(), vB, vHV, vK, vV);
    opt.grad_initial_state = la::view(ds0.data(), vB, vHV, vK, vV);
    return opt;
  }
  bool outputs_untouched() const {
    for (const auto* x : {&dq, &dk, &dv, &dg, &dbeta, &ds0, &s1})
      for (float e : *x)
        if (!std::isnan(e)) return false;
    return true;
  }
};

/// `call(form)` must throw linattn::error with every fragment in its message, for both forms,
/// and write nothing.
template <class Call>
void expect_backward_error(Call&& call, const std::vector<std::string>& fragments) {
  for (bform f : {bform::recurrent, bform::chunkwise}) {
    bad_call_data d;
    std::string msg;
    try {
      call(d, f);
    } catch (const la::error& e) {
      msg = e.what();
    }
    CAPTURE(name(f), msg);
    REQUIRE_FALSE(msg.empty());
    CHECK(msg.find(std::string("linattn::") + name(f) + "<GatedDelta>") != std::string::npos);
    for (const auto& fr : fragments) {
      CAPTURE(fr);
      CHECK(msg.find(fr) != std::string::npos);
    }
    CHECK(d.outputs_untouched());
  }
}

template <class In, class Out, class Grads, class Opt>
void call_backward(bform f, const In& in, const Out& out, const Grads& gr, const Opt& opt) {
  if (f == bform::recurrent) la::recurrent_backward<la::GatedDelta>(in, out, gr, opt);
  else la::chunkwise_backward<la::GatedDelta>(in, out, gr, opt);
}

using GD = la::GatedDelta::gradients<float>;
using BO = la::backward_options<float>;

/// A call with one gradient view (or option) changed.
template <class Mutate>
void expect_bad(Mutate mutate, const std::vector<std::string>& fragments) {
  expect_backward_error(
      [&](bad_call_data& d, bform f) {
        auto gr = d.grads();
        auto opt = d.opts();
        auto out = d.grad_out();
        mutate(d, gr, opt, out);
        call_backward(f, d.in(), out, gr, opt);
      },
      fragments);
}

}  // namespace

TEST_CASE("backward: a valid call writes every gradient (control for the bad calls)", "[backward][validation]") {
  for (bform f : {bform::recurrent, bform::chunkwise}) {
    bad_call_data d;
    call_backward(f, d.in(), d.grad_out(), d.grads(), d.opts());
    for (const auto* x : {&d.dq, &d.dk, &d.dv, &d.dg, &d.dbeta, &d.ds0})
      for (float e : *x) REQUIRE(std::isfinite(e));
  }
}

TEST_CASE("backward: gradient views of the wrong shape or missing are rejected, nothing written",
          "[backward][validation]") {
  using V4 = la::tensor_view<const float, 4>;
  expect_bad([](bad_call_data&, GD& g, BO&, V4&) { g.dq = {}; }, {"'dq' is missing", "[B, T, H, K]"});
  expect_bad([](bad_call_data&, GD& g, BO&, V4&) { g.dv = {}; }, {"'dv' is missing"});
  expect_bad([](bad_call_data&, GD& g, BO&, V4&) { g.dg = {}; }, {"'dg' is missing", "[B, T, HV]"});
  expect_bad([](bad_call_data&, GD& g, BO&, V4&) { g.dbeta = {}; }, {"'dbeta' is missing"});
  expect_bad([](bad_call_data& d, GD& g, BO&, V4&) { g.dk = la::view(d.dk.data(), vB, vT, vH, vK - 1); },
             {"'dk' has shape [2, 9, 2, 3]", "expected [B, T, H, K] (the shape of k) = [2, 9, 2, 4]"});
  expect_bad([](bad_call_data& d, GD& g, BO&, V4&) { g.dv = la::view(d.dv.data(), vB, vT, vH, vV); },
             {"'dv' has shape [2, 9, 2, 3]", "= [2, 9, 4, 3]"});
  expect_bad([](bad_call_data& d, GD& g, BO&, V4&) { g.dbeta = la::view(d.dbeta.data(), vB, vT - 1, vHV); },
             {"'dbeta' has shape [2, 8, 4]", "expected [B, T, HV] = [2, 9, 4]"});
  expect_bad([](bad_call_data& d, GD&, BO&, V4& out) { out = la::view(d.dout.data(), vB, vT, vHV, vV - 1); },
             {"'grad_out' has shape [2, 9, 4, 2]", "expected [B, T, HV, V]"});
  expect_bad([](bad_call_data& d, GD&, BO& o, V4&) { o.grad_final_state = la::view(d.ds1.data(), vB, vHV, vV, vK); },
             {"'options.grad_final_state' has shape [2, 4, 3, 4]", "expected [N, HV, K, V] = [2, 4, 4, 3]"});
  expect_bad([](bad_call_data& d, GD&, BO& o, V4&) { o.grad_initial_state = la::view(d.ds0.data(), 1, vHV, vK, vV); },
             {"'options.grad_initial_state' has shape [1, 4, 4, 3]"});
  expect_bad([](bad_call_data& d, GD&, BO& o, V4&) { o.final_state = la::view(d.s1.data(), vB, vHV, vK, vV); },
             {"'options.final_state' is set, expected none"});
  expect_bad([](bad_call_data&, GD&, BO& o, V4&) { o.chunk_size = 0; }, {"'options.chunk_size' is 0, expected 1..256"});
  expect_bad([](bad_call_data& d, GD& g, BO&, V4&) {
    g.dq = la::view(d.dq.data(), {vB, vT, vH, vK}, {vT * vH * vK, vH * vK, 0, 1});
  }, {"'dq' has strides", "share memory"});
}

TEST_CASE("backward: gradients must not overlap inputs, each other or the state gradients", "[backward][validation]") {
  using V4 = la::tensor_view<const float, 4>;
  // dq written over q, dv over grad_out, dg over g, dk over dq, the state gradients over each other.
  expect_bad([](bad_call_data& d, GD& g, BO&, V4&) { g.dq = la::view(const_cast<float*>(d.q.data()), vB, vT, vH, vK); },
             {"'dq' overlaps input 'q'"});
  expect_bad([](bad_call_data& d, GD& g, BO&, V4&) { g.dv = la::view(d.dout.data(), vB, vT, vHV, vV); },
             {"'dv' overlaps input 'grad_out'"});
  expect_bad([](bad_call_data& d, GD& g, BO&, V4&) { g.dg = la::view(d.g.data(), vB, vT, vHV); },
             {"'dg' overlaps input 'g'"});
  expect_bad([](bad_call_data& d, GD& g, BO&, V4&) { g.dk = la::view(d.dq.data(), vB, vT, vH, vK); },
             {"'dk' overlaps 'dq'"});
  expect_bad([](bad_call_data& d, GD&, BO& o, V4&) { o.grad_initial_state = la::view(d.s0.data(), vB, vHV, vK, vV); },
             {"'options.grad_initial_state' overlaps input 'options.initial_state'"});
  expect_bad([](bad_call_data& d, GD&, BO& o, V4&) { o.grad_initial_state = la::view(d.ds1.data(), vB, vHV, vK, vV); },
             {"'options.grad_initial_state' overlaps input 'options.grad_final_state'"});
  expect_bad([](bad_call_data& d, GD& g, BO&, V4&) { g.dbeta = la::view(d.dv.data() + 1, vB, vT, vHV); },
             {"'dbeta' overlaps 'dv'"});
}

TEST_CASE("backward: check_finite scans grad_out and grad_final_state", "[backward][validation]") {
  using V4 = la::tensor_view<const float, 4>;
  expect_bad([](bad_call_data& d, GD&, BO& o, V4&) {
    o.check_finite = true;
    d.dout[5] = std::numeric_limits<float>::infinity();
  }, {"'grad_out' holds a non-finite value"});
  expect_bad([](bad_call_data& d, GD&, BO& o, V4&) {
    o.check_finite = true;
    d.ds1[2] = fnan;
  }, {"'options.grad_final_state' holds a non-finite value"});
}

// ---- chunkwise_backward == recurrent_backward ------------------------------------------------

TEMPLATE_TEST_CASE("chunkwise_backward == recurrent_backward (float and double, C in {1, 16, 64})", "[backward]",
                   LINEAR_RULES) {
  using Rule = TestType;
  std::mt19937_64 rng(904);
  const auto p = backward_problem<Rule>(rng, {.B = 2, .T = 100, .H = 2, .HV = 4, .K = 16, .V = 12});
  const seeds s = make_seeds(rng, p);
  const gradients want = run_backward<Rule, double>(bform::recurrent, p, s, {.chunk = 32});
  auto expect_close = [&](const gradients& got, double tol) {
    std::string worst;
    const double e = max_rel_err(got, want, p, worst);
    CAPTURE(e, worst);
    CHECK(e < tol);
    CHECK(got.padding_ok);
  };
  for (index_t C : {1, 16, 64}) {
    CAPTURE(C);
    expect_close(run_backward<Rule, double>(bform::chunkwise, p, s, {.chunk = C}), 1e-10);
    expect_close(run_backward<Rule, float>(bform::chunkwise, p, s, {.chunk = C}), 1e-4);
  }
  expect_close(run_backward<Rule, float>(bform::recurrent, p, s, {.chunk = 16}), 1e-4);
}

TEMPLATE_TEST_CASE("chunkwise_backward in float stays finite and close under strong and zero gates, large steps",
                   "[backward][robust]", LINEAR_RULES) {
  using Rule = TestType;
  std::mt19937_64 rng(907);
  for (gates gm : {gates::strong, gates::zero, gates::weak}) {
    CAPTURE(int(gm));
    const auto p = backward_problem<Rule>(rng, {.B = 1, .T = 150, .H = 1, .HV = 2, .K = 32, .V = 24}, gm, true, {},
                                          steps::large);
    const seeds s = make_seeds(rng, p);
    const gradients want = run_backward<Rule, double>(bform::recurrent, p, s, {.chunk = 64});
    for (index_t C : {16, 64, 128}) {
      CAPTURE(C);
      std::string worst;
      const double e = max_rel_err(run_backward<Rule, float>(bform::chunkwise, p, s, {.chunk = C}), want, p, worst);
      CAPTURE(e, worst);
      CHECK(e < 1e-4);
    }
  }
}

// -120: exp underflows to exactly 0 in float. One such gate per 16 tokens: the chunk-local gate
// cumsums are in the state type, as the forward's, and a float cumsum that reaches thousands
// inside a chunk keeps fewer digits of its differences (at -1e4 forward and backward alike are
// off by ~1e-3; docs/backward.md#gate-gradient).
TEMPLATE_TEST_CASE("backward: log gates of -120 (float decay factors exactly 0) give finite, matching gradients",
                   "[backward][robust]", la::ScalarDecay, la::VectorDecay, la::GatedDelta, la::KDA) {
  using Rule = TestType;
  std::mt19937_64 rng(910);
  auto p = backward_problem<Rule>(rng, {.B = 1, .T = 90, .H = 1, .HV = 2, .K = 12, .V = 10});
  const std::size_t per_token = p.g.size() / std::size_t(p.d.T * p.d.HV);  // 1 or K
  for (int t = 5; t < p.d.T; t += 16)  // tokens 5, 21, 37, ...: every gate of the token
    for (int hv = 0; hv < p.d.HV; ++hv)
      for (std::size_t d = 0; d < per_token; ++d) p.g[p.tok_at(0, t, hv) * per_token + d] = -120.0;
  const seeds s = make_seeds(rng, p);
  const gradients want = run_backward<Rule, double>(bform::recurrent, p, s, {.chunk = 16});
  for (bform f : {bform::recurrent, bform::chunkwise}) {
    for (index_t C : {16, 64}) {
      CAPTURE(name(f), C);
      std::string worst;
      const double d = max_rel_err(run_backward<Rule, double>(f, p, s, {.chunk = C}), want, p, worst);
      const double e = max_rel_err(run_backward<Rule, float>(f, p, s, {.chunk = C}), want, p, worst);
      CAPTURE(d, e, worst);
      CHECK(d < 1e-10);
      CHECK(e < 1e-4);
    }
  }
  std::mt19937_64 dirs(911);
  expect_finite_differences<Rule>(bform::chunkwise, p, dirs, {.chunk = 16});
}

TEMPLATE_TEST_CASE("chunkwise_backward: per-key gates of -2 per step over 64-token chunks (no exp overflow)",
                   "[backward][robust]", la::VectorDecay, la::ScalarDecay, la::GatedDelta, la::KDA) {
  using Rule = TestType;
  std::mt19937_64 rng(908);
  auto p = backward_problem<Rule>(rng, {.B = 1, .T = 130, .H = 1, .HV = 1, .K = 16, .V = 8});
  for (auto& g : p.g) g = -2.0;
  const seeds s = make_seeds(rng, p);
  const gradients want = run_backward<Rule, double>(bform::recurrent, p, s, {.chunk = 64});
  std::string worst;
  const double e = max_rel_err(run_backward<Rule, float>(bform::chunkwise, p, s, {.chunk = 64}), want, p, worst);
  CAPTURE(e, worst);
  CHECK(e < 1e-4);
}

TEMPLATE_TEST_CASE("chunkwise_backward at a production-like size (K = 64, V = 128, short last chunk)", "[backward]",
                   LINEAR_RULES) {
  using Rule = TestType;
  std::mt19937_64 rng(909);
  const auto p = backward_problem<Rule>(rng, {.B = 1, .T = 300, .H = 1, .HV = 2, .K = 64, .V = 128});
  const seeds s = make_seeds(rng, p);
  const gradients want = run_backward<Rule, double>(bform::recurrent, p, s, {.chunk = 64});
  for (index_t C : {64, 128}) {
    CAPTURE(C);
    std::string worst;
    const double d = max_rel_err(run_backward<Rule, double>(bform::chunkwise, p, s, {.chunk = C}), want, p, worst);
    CAPTURE(d, worst);
    CHECK(d < 1e-10);
    const double f = max_rel_err(run_backward<Rule, float>(bform::chunkwise, p, s, {.chunk = C}), want, p, worst);
    CAPTURE(f, worst);
    CHECK(f < 1e-4);
  }
}

// ---- results independent of the thread count ----------------------------------------------

TEMPLATE_TEST_CASE("backward results do not depend on the thread count (bitwise, 1 vs 2 vs 3 threads)",
                   "[backward][threads]", LINEAR_RULES) {
  using Rule = TestType;
  std::mt19937_64 rng(905);
  // Grouped value heads (dq, dk summed over 3 value heads), several sequences, a packed batch.
  const auto p = backward_problem<Rule>(rng, {.B = 1, .T = 70, .H = 2, .HV = 6, .K = 8, .V = 5}, gates::mild, true,
                                        {0, 30, 31, 70});
  const seeds s = make_seeds(rng, p);
  for (bform f : {bform::recurrent, bform::chunkwise}) {
    CAPTURE(name(f));
    const gradients one = run_backward<Rule, float>(f, p, s, {.chunk = 16, .threads = 1});
    for (int threads : {2, 3}) {
      CAPTURE(threads);
      CHECK(identical(one, run_backward<Rule, float>(f, p, s, {.chunk = 16, .threads = threads})));
    }
  }
}
