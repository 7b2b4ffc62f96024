// SPDX-License-Identifier: MIT
// 16-bit inputs on the CPU (Eigen::bfloat16, Eigen::half; float state): every linear rule in
// the recurrent, chunkwise and parallel forms and decode against the float64 reference run on
// the same inputs rounded to the 16-bit type. Outputs are rounded once when stored, so they
// match to the type's rounding (bf16 2^-8, half 2^-11 relative); the float state to 1e-4.
#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <limits>
#include <random>
#include <string>

#include "support/backward_harness.hpp"
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

/// q, k, v rounded to X; gates, betas and the (float) state to float: fla's mixed precision.
template <class X>
ref::problem mixed(ref::problem p) {
  for (auto* v : {&p.q, &p.k, &p.v}) round_to<X>(*v);
  for (auto* v : {&p.g, &p.beta, &p.s0}) round_to<float>(*v);
  return p;
}

template <class X>
double output_tolerance() {
  return std::is_same_v<X, Eigen::bfloat16> ? 1e-2 : 2e-3;
}

/// Every form of Rule with q, k, v in X and the gates and betas in G (X, or float: then they
/// must be read as float, not rounded to X; the float state matches to 1e-4, far below X's
/// rounding of a gate) against float64 on the same rounded values.
template <class Rule, class X, class G = X>
void check_rule(std::uint64_t seed, gates gm = gates::mild) {
  std::mt19937_64 rng(seed);
  const ref::dims d{.B = 2, .T = 45, .H = 2, .HV = 4, .K = 16, .V = 12};
  const auto p = std::is_same_v<G, X> ? rounded<X>(mixed<X>(make_problem(rng, d, spec_of<Rule>(), gm)))
                                      : mixed<X>(make_problem(rng, d, spec_of<Rule>(), gm));
  const auto want = ref::run(p);
  for (form f : {form::recurrent, form::chunkwise, form::parallel, form::decode}) {
    CAPTURE(Rule::name, name(f));
    const auto got = run<Rule, X, G>(f, p, {.chunk = 16});
    CHECK(rel_err(got.r.o, want.o) < output_tolerance<X>());
    if (f != form::decode) CHECK(rel_err(got.r.s, want.s) < 1e-4);
    CHECK(got.padding_ok);
  }
}
}  // namespace

TEMPLATE_TEST_CASE("16-bit q, k, v with float gates and betas: every linear rule and form matches float64",
                   "[forms][half][mixed]", Eigen::bfloat16, Eigen::half) {
  check_rule<la::ScalarDecay, TestType, float>(11, gates::strong);
  check_rule<la::VectorDecay, TestType, float>(12, gates::strong);
  check_rule<la::Delta, TestType, float>(13, gates::strong);
  check_rule<la::GatedDelta, TestType, float>(14, gates::strong);
  check_rule<la::Longhorn, TestType, float>(15, gates::strong);
  check_rule<la::KDA, TestType, float>(16, gates::strong);
  check_rule<la::LonghornDiagonal, TestType, float>(17, gates::strong);
}

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

TEMPLATE_TEST_CASE("16-bit q, k, v normalised by options::normalize_qk: forms and backward match float64",
                   "[forms][backward][half][qk_norm]", Eigen::bfloat16, Eigen::half) {
  std::mt19937_64 rng(31);
  const ref::dims d{.B = 2, .T = 45, .H = 2, .HV = 4, .K = 16, .V = 12};
  auto p = backward_problem<la::GatedDelta>(rng, d, gates::mild);
  for (double& e : p.k) e *= 6.0;  // keys far from unit length: without the option the rule diverges
  for (double& e : p.q) e *= 0.25;
  p = mixed<TestType>(p);
  p.normalize_qk = true;
  const auto want = ref::run(p);
  for (form f : {form::recurrent, form::chunkwise, form::parallel, form::decode}) {
    CAPTURE(name(f));
    const auto got = run<la::GatedDelta, TestType, float>(f, p, {.chunk = 16, .normalize_qk = true});
    CHECK(rel_err(got.r.o, want.o) < output_tolerance<TestType>());
    if (f != form::decode) CHECK(rel_err(got.r.s, want.s) < output_tolerance<TestType>());  // keys rounded to X
  }
  seeds s = make_seeds(rng, p);
  round_to<TestType>(s.dout);
  round_to<float>(s.ds1);
  const gradients ref_grads = run_backward<la::GatedDelta, double>(bform::recurrent, p, s, {.chunk = 16, .normalize_qk = true});
  for (bform f : {bform::recurrent, bform::chunkwise}) {
    CAPTURE(name(f));
    const gradients got = run_backward<la::GatedDelta, TestType, float>(f, p, s, {.chunk = 16, .normalize_qk = true});
    CHECK(got.padding_ok);
    for (auto [g, w] : {std::pair{&got.dq, &ref_grads.dq}, {&got.dk, &ref_grads.dk}, {&got.dv, &ref_grads.dv},
                        {&got.dg, &ref_grads.dg}, {&got.dbeta, &ref_grads.dbeta}, {&got.ds0, &ref_grads.ds0}})
      CHECK(rel_err(*g, *w) < 2 * output_tolerance<TestType>());
  }
}

namespace {
/// The backward forms with 16-bit q, k, v and grad_out, float gates and betas and float
/// gradients of them: against the float64 backward on the same rounded inputs. dq, dk, dv are
/// rounded once when stored; dg and dbeta are float, so they match as a float backward does.
template <class Rule, class X>
void check_mixed_backward(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const ref::dims d{.B = 2, .T = 45, .H = 2, .HV = 4, .K = 16, .V = 12};
  const auto p = mixed<X>(backward_problem<Rule>(rng, d, gates::strong));
  seeds s = make_seeds(rng, p);
  round_to<X>(s.dout);
  round_to<float>(s.ds1);
  const gradients want = run_backward<Rule, double>(bform::recurrent, p, s, {.chunk = 16});
  for (bform f : {bform::recurrent, bform::chunkwise}) {
    CAPTURE(Rule::name, name(f));
    const gradients got = run_backward<Rule, X, float>(f, p, s, {.chunk = 16});
    CHECK(got.padding_ok);
    CHECK(rel_err(got.dq, want.dq) < output_tolerance<X>());
    CHECK(rel_err(got.dk, want.dk) < output_tolerance<X>());
    CHECK(rel_err(got.dv, want.dv) < output_tolerance<X>());
    CHECK(rel_err(got.ds0, want.ds0) < 1e-4);
    if (!p.g.empty()) CHECK(rel_err(got.dg, want.dg) < 1e-4);
    if (!got.dbeta.empty()) CHECK(rel_err(got.dbeta, want.dbeta) < 1e-4);
  }
}
}  // namespace

TEMPLATE_TEST_CASE("16-bit q, k, v with float gates and betas: backward gradients match float64",
                   "[backward][half][mixed]", Eigen::bfloat16, Eigen::half) {
  check_mixed_backward<la::ScalarDecay, TestType>(21);
  check_mixed_backward<la::VectorDecay, TestType>(22);
  check_mixed_backward<la::Delta, TestType>(23);
  check_mixed_backward<la::GatedDelta, TestType>(24);
  check_mixed_backward<la::Longhorn, TestType>(25);
  check_mixed_backward<la::KDA, TestType>(26);
}

// ---- the other families: 16-bit q, k, v (and the rule's other per-token vectors) with float
// coefficients give exactly the float computation on the same values -------------------------

namespace {
template <class E>
struct tag {};

/// Normal values scaled by `s` and shifted by `m`, rounded to X (so that a float copy and an X
/// copy hold the same numbers).
template <class X>
std::vector<float> values(std::mt19937_64& rng, index_t n, double s = 1.0, double m = 0.0) {
  std::normal_distribution<double> normal;
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& e : x) e = static_cast<float>(static_cast<X>(static_cast<float>(m + s * normal(rng))));
  return x;
}
template <class X>
std::vector<X> narrow(const std::vector<float>& x) {
  return std::vector<X>(x.begin(), x.end());
}

/// Runs the recurrent and chunkwise forms of Rule once on float inputs (`make(tag<float>{})`)
/// and once on X inputs with the same values and float coefficients (`make(tag<X>{})`): the
/// float states agree to float rounding (1e-5; RLS, whose updates amplify rounding, 2e-4;
/// rounding a coefficient to X moves them by 1e-3 and more) and the X output to X's rounding
/// of it.
template <class Rule, class X, class Make>
void same_as_float(Make make, index_t B, index_t T, index_t HV, index_t K, index_t V, index_t columns,
                   double state_tolerance = 1e-5) {
  for (form f : {form::recurrent, form::chunkwise}) {
    CAPTURE(Rule::name, name(f));
    std::vector<float> o32(std::size_t(B * T * HV * V)), s32(std::size_t(B * HV * K * columns)), s16(s32.size(), -7.0f);
    std::vector<X> o16(o32.size(), X(-7.0f));
    la::options<float> opt;
    opt.chunk_size = 16;
    opt.final_state = la::view(s32.data(), B, HV, K, columns);
    const auto run = [&](const auto& in, const auto& out) {
      if (f == form::recurrent) la::recurrent_forward<Rule>(in, out, opt);
      else la::chunkwise_forward<Rule>(in, out, opt);
    };
    run(make(tag<float>{}), la::view(o32.data(), B, T, HV, V));
    opt.final_state = la::view(s16.data(), B, HV, K, columns);
    run(make(tag<X>{}), la::view(o16.data(), B, T, HV, V));
    const auto wide = [](const auto& x) { return std::vector<double>(x.begin(), x.end()); };
    const double es = rel_err(wide(s16), wide(s32)), eo = rel_err(wide(o16), wide(o32));
    CAPTURE(es, eo);
    CHECK(es < state_tolerance);
    CHECK(eo < output_tolerance<X>());
  }
}
}  // namespace

TEMPLATE_TEST_CASE("16-bit inputs with float coefficients: mLSTM, RLS, RWKV-7, GatedDeltaProduct, Mamba, TTT-Linear",
                   "[forms][half][mixed]", Eigen::bfloat16, Eigen::half) {
  using X = TestType;
  std::mt19937_64 rng(31);
  const index_t B = 2, T = 37, H = 2, HV = 4, K = 16, V = 12, n = B * T;
  const auto q = values<X>(rng, n * H * K), k = values<X>(rng, n * H * K), v = values<X>(rng, n * HV * V);
  const auto q16 = narrow<X>(q), k16 = narrow<X>(k), v16 = narrow<X>(v);
  // float coefficients, not representable in X
  std::vector<float> g(std::size_t(n * HV)), gk(std::size_t(n * HV * K)), i_gate(g.size()), f_gate(g.size());
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& e : g) e = -0.3f * u(rng) - 1e-3f;
  for (float& e : gk) e = -0.3f * u(rng) - 1e-3f;
  for (float& e : i_gate) e = 2.0f * u(rng) - 1.0f;
  for (float& e : f_gate) e = 3.0f * u(rng) + 0.5f;
  const auto qv = [&](const auto& x, index_t heads, index_t d) { return la::view(x.data(), B, T, heads, d); };
  const auto pick = [](auto t, const auto& x32, const auto& x16) -> const auto& {
    if constexpr (std::is_same_v<decltype(t), tag<float>>) return x32;
    else return x16;
  };

  SECTION("mLSTM: float i and f") {
    same_as_float<la::mLSTM, X>(
        [&](auto t) {
          using E = std::conditional_t<std::is_same_v<decltype(t), tag<float>>, float, X>;
          return typename la::mLSTM::template inputs<E>{.q = qv(pick(t, q, q16), H, K), .k = qv(pick(t, k, k16), H, K),
                                                        .v = qv(pick(t, v, v16), HV, V), .i = la::view(i_gate.data(), B, T, HV),
                                                        .f = la::view(f_gate.data(), B, T, HV)};
        },
        B, T, HV, K, V, V + 2);
  }
  SECTION("RLS: float log forgetting factors") {
    same_as_float<la::RLS, X>(
        [&](auto t) {
          using E = std::conditional_t<std::is_same_v<decltype(t), tag<float>>, float, X>;
          return typename la::RLS::template inputs<E>{.q = qv(pick(t, q, q16), H, K), .k = qv(pick(t, k, k16), H, K),
                                                      .v = qv(pick(t, v, v16), HV, V), .g = la::view(g.data(), B, T, HV)};
        },
        B, T, HV, K, V, V + K, 2e-4);
  }
  SECTION("RWKV-7: float per-key decays, X low-rank vectors") {
    const auto a = values<X>(rng, n * HV * K, 0.2), b = values<X>(rng, n * HV * K, 0.2);
    const auto a16 = narrow<X>(a), b16 = narrow<X>(b);
    same_as_float<la::RWKV7, X>(
        [&](auto t) {
          using E = std::conditional_t<std::is_same_v<decltype(t), tag<float>>, float, X>;
          return typename la::RWKV7::template inputs<E>{
              .q = qv(pick(t, q, q16), H, K), .k = qv(pick(t, k, k16), H, K), .v = qv(pick(t, v, v16), HV, V),
              .g = la::view(gk.data(), B, T, HV, K), .a = qv(pick(t, a, a16), HV, K), .b = qv(pick(t, b, b16), HV, K)};
        },
        B, T, HV, K, V, V);
  }
  SECTION("GatedDeltaProduct: float gates and step betas") {
    constexpr index_t steps = 2;
    auto ks = values<X>(rng, n * steps * H * K);
    for (std::size_t r = 0; r < ks.size(); r += std::size_t(K)) {  // unit keys, then rounded again
      float s = 0;
      for (index_t d = 0; d < K; ++d) s += ks[r + std::size_t(d)] * ks[r + std::size_t(d)];
      for (index_t d = 0; d < K; ++d) ks[r + std::size_t(d)] = static_cast<float>(X(ks[r + std::size_t(d)] / std::sqrt(s)));
    }
    const auto vs = values<X>(rng, n * steps * HV * V);
    const auto ks16 = narrow<X>(ks), vs16 = narrow<X>(vs);
    std::vector<float> betas(std::size_t(n * steps * HV));
    for (float& e : betas) e = 0.9f * u(rng) + 0.05f;
    same_as_float<la::GatedDeltaProduct, X>(
        [&](auto t) {
          using E = std::conditional_t<std::is_same_v<decltype(t), tag<float>>, float, X>;
          return typename la::GatedDeltaProduct::template inputs<E>{
              .q = qv(pick(t, q, q16), H, K), .k = la::view(pick(t, ks, ks16).data(), B, T, steps, H, K),
              .v = la::view(pick(t, vs, vs16).data(), B, T, steps, HV, V), .g = la::view(g.data(), B, T, HV),
              .beta = la::view(betas.data(), B, T, steps, HV)};
        },
        B, T, HV, K, V, V);
  }
  SECTION("Mamba: float A, D and dt_bias; X dt") {
    const auto dt = values<X>(rng, n * HV * V, 1.0, -2.0);
    const auto dt16 = narrow<X>(dt);
    std::vector<float> A(std::size_t(HV * V * K)), D(std::size_t(HV * V)), bias(D.size());
    for (float& e : A) e = -(0.1f + 2.0f * u(rng));
    for (float& e : D) e = u(rng);
    for (float& e : bias) e = 0.5f * u(rng) - 0.25f;
    same_as_float<la::Mamba, X>(
        [&](auto t) {
          using E = std::conditional_t<std::is_same_v<decltype(t), tag<float>>, float, X>;
          return typename la::Mamba::template inputs<E>{
              .q = qv(pick(t, q, q16), H, K), .k = qv(pick(t, k, k16), H, K), .v = qv(pick(t, v, v16), HV, V),
              .dt = qv(pick(t, dt, dt16), HV, V), .A = la::view(A.data(), HV, V, K), .D = la::view(D.data(), HV, V),
              .dt_bias = la::view(bias.data(), HV, V), .delta_softplus = true};
        },
        B, T, HV, K, V, V);
  }
  SECTION("TTT-Linear: float step sizes and LayerNorm parameters") {
    const index_t Dd = K;  // TTT: V = K = D
    const auto vt = values<X>(rng, n * HV * Dd);
    const auto vt16 = narrow<X>(vt);
    std::vector<float> eta(std::size_t(n * HV)), w(std::size_t(HV * Dd)), bi(w.size());
    for (float& e : eta) e = 0.1f * u(rng) + 0.01f;
    for (float& e : w) e = 1.0f + 0.2f * u(rng);
    for (float& e : bi) e = 0.2f * u(rng) - 0.1f;
    same_as_float<la::TTTLinear, X>(
        [&](auto t) {
          using E = std::conditional_t<std::is_same_v<decltype(t), tag<float>>, float, X>;
          return typename la::TTTLinear::template inputs<E>{
              .q = qv(pick(t, q, q16), H, K), .k = qv(pick(t, k, k16), H, K), .v = qv(pick(t, vt, vt16), HV, Dd),
              .eta = la::view(eta.data(), B, T, HV), .ln_weight = la::view(w.data(), HV, Dd),
              .ln_bias = la::view(bi.data(), HV, Dd), .mini_batch = 8};
        },
        B, T, HV, K, Dd, Dd);
  }
}

TEST_CASE("16-bit inputs with float gates: bad gates are rejected, naming the argument, nothing written",
          "[forms][half][mixed][validation]") {
  using X = Eigen::bfloat16;
  const index_t B = 1, T = 8, H = 1, K = 4, V = 4;
  std::vector<X> q(std::size_t(B * T * H * K), X(0.25f)), k(q.size(), X(0.5f)), v(q.size(), X(1.0f));
  std::vector<float> g(std::size_t(B * T * H), -0.1f);
  std::vector<float> beta(std::size_t(B * T * H * V), 0.5f);  // [B, T, H] used; room for an out view over it
  std::vector<X> out(std::size_t(B * T * H * V), X(7.0f));
  const auto call = [&](const la::GatedDelta::inputs<X>& in, la::tensor_view<X, 4> o) -> std::string {
    la::options<float> opt;
    opt.check_finite = true;
    try {
      la::chunkwise_forward<la::GatedDelta>(in, o, opt);
    } catch (const la::error& e) {
      return e.what();
    }
    return "";
  };
  const auto inputs = [&](la::coefficient_view<X, 3> gv) {
    return la::GatedDelta::inputs<X>{.q = la::view(q.data(), B, T, H, K), .k = la::view(k.data(), B, T, H, K),
                                     .v = la::view(v.data(), B, T, H, V), .g = gv,
                                     .beta = la::view(beta.data(), B, T, H)};
  };
  const auto untouched = [&] {
    return std::all_of(out.begin(), out.end(), [](X x) { return static_cast<float>(x) == 7.0f; });
  };
  const auto o = la::view(out.data(), B, T, H, V);
  CHECK(call(inputs(la::view(g.data(), B, T, H)), o).empty());  // control: a valid call
  std::fill(out.begin(), out.end(), X(7.0f));

  g[3] = std::numeric_limits<float>::quiet_NaN();
  std::string m = call(inputs(la::view(g.data(), B, T, H)), o);
  CHECK(m.find("argument 'g' holds a non-finite value") != std::string::npos);
  g[3] = 1e-3f;  // a positive log gate that bf16 would also hold
  m = call(inputs(la::view(g.data(), B, T, H)), o);
  CHECK(m.find("argument 'g' holds a positive log gate") != std::string::npos);
  g[3] = -0.1f;
  m = call(inputs(la::view(g.data(), B, T - 1, H)), o);
  CHECK(m.find("argument 'g' has shape [1, 7, 1]") != std::string::npos);
  // out over the float betas' bytes: the overlap check counts each view's own element size
  m = call(inputs(la::view(g.data(), B, T, H)), la::view(reinterpret_cast<X*>(beta.data()), B, T, H, V));
  CHECK(m.find("overlaps input 'beta'") != std::string::npos);
  CHECK(untouched());
  CHECK(std::all_of(beta.begin(), beta.end(), [](float b) { return b == 0.5f; }));
}

TEMPLATE_TEST_CASE("a coefficient loaded ahead reads as the view reads it, stored in either type", "[half][mixed]",
                   Eigen::bfloat16, Eigen::half) {
  using X = TestType;
  const index_t B = 2, T = 7, H = 3;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> wide(std::size_t(B * T * H * 2));  // every second token: a strided view
  std::vector<X> narrow(wide.size());
  for (std::size_t i = 0; i < wide.size(); ++i) wide[i] = normal(rng), narrow[i] = X(normal(rng));
  const std::array<index_t, 3> extents{B, T, H}, strides{T * 2 * H, 2 * H, 1};
  const la::coefficient_view<X, 3> views[] = {la::tensor_view<const float, 3>(wide.data(), extents, strides),
                                              la::tensor_view<const X, 3>(narrow.data(), extents, strides)};
  for (const auto& x : views)
    for (index_t b = 0; b < B; ++b)
      for (index_t t = 0; t < T; ++t)
        for (index_t h = 0; h < H; ++h) {
          const auto ahead = la::load_ahead(x, b, t, h);
          CHECK(ahead.wide == x.wide());
          CHECK(la::value_of(ahead) == x(b, t, h));
        }
  CHECK(la::value_of(decltype(la::load_ahead(views[1], 0, 0, 0)){}) == 0.0f);  // the default reads as 0
  const la::tensor_view<const float, 3> plain(wide.data(), extents, strides);
  CHECK(la::value_of(la::load_ahead(plain, 1, 6, 2)) == plain(1, 6, 2));
}
