// SPDX-License-Identifier: MIT
// Mamba's selective scan (docs/math.md#mamba): every form against a float64 reference written
// here from the S6 recurrence, on odd T, state size != channels, grouped value heads, packed
// batches with one-token sequences, carried state, strong decays and Delta = 0; the Mamba-2
// special case against ScalarDecay; thread independence; and the argument checks.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "support/catch.hpp"
#include "support/harness.hpp"

#include <linattn/rules/mamba.hpp>
#include <linattn/rules/mamba2.hpp>

namespace {
namespace la = linattn;
using la::index_t;

/// K is the state size N, V the channels per value head.
struct sproblem {
  index_t B = 2, T = 37, H = 2, HV = 4, K = 5, V = 7;
  std::vector<std::int64_t> cu;              // packed batch offsets (then B == 1)
  std::vector<double> x, dt, z, Bm, Cm;       // x, dt, z [B, T, HV, V]; Bm, Cm [B, T, H, K]
  std::vector<double> A, D, dt_bias, s0;      // A [HV, V, K]; D, dt_bias [HV, V]; s0 [N, HV, K, V]
  bool softplus = false;
  double scale = 0;  // options.scale on C; 0: unset (Mamba's default, 1)
  index_t N() const { return cu.empty() ? B : index_t(cu.size()) - 1; }
};

struct gen {
  bool softplus = true, skip = true, gate = true, state = true;
  double dt_mean = 0.0, dt_sd = 1.0, a_lo = 0.05, a_hi = 2.0;
};

sproblem make(std::mt19937_64& rng, sproblem p, const gen& g) {
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto fill = [&](std::vector<double>& x, index_t n, auto&& draw) {
    x.resize(std::size_t(n));
    for (auto& e : x) e = draw();
  };
  const index_t tok = p.B * p.T * p.HV * p.V;
  fill(p.x, tok, [&] { return normal(rng); });
  if (g.softplus) fill(p.dt, tok, [&] { return g.dt_mean + g.dt_sd * normal(rng); });
  else fill(p.dt, tok, [&] { return g.dt_mean + g.dt_sd * unit(rng); });  // >= 0 as it is
  fill(p.Bm, p.B * p.T * p.H * p.K, [&] { return normal(rng); });
  fill(p.Cm, p.B * p.T * p.H * p.K, [&] { return normal(rng); });
  fill(p.A, p.HV * p.V * p.K, [&] { return -(g.a_lo + (g.a_hi - g.a_lo) * unit(rng)); });
  p.softplus = g.softplus;
  if (g.softplus) fill(p.dt_bias, p.HV * p.V, [&] { return 0.5 * normal(rng); });
  if (g.skip) fill(p.D, p.HV * p.V, [&] { return normal(rng); });
  if (g.gate) fill(p.z, tok, [&] { return 2.0 * normal(rng); });
  if (g.state) fill(p.s0, p.N() * p.HV * p.K * p.V, [&] { return normal(rng); });
  return p;
}

struct sresult {
  std::vector<double> y, s;  // [B, T, HV, V], [N, HV, K, V]
};

/// The S6 recurrence per (sequence, value head, channel d), from the formula:
///   h[n] <- exp(Delta A[d, n]) h[n] + Delta B_t[n] x_t[d],  y = (sum_n C_t[n] h[n] + D x) silu(z).
sresult reference(const sproblem& p) {
  sresult r;
  r.y.assign(std::size_t(p.B * p.T * p.HV * p.V), 0.0);
  r.s.assign(std::size_t(p.N() * p.HV * p.K * p.V), 0.0);
  for (index_t s = 0; s < p.N(); ++s)
    for (index_t hv = 0; hv < p.HV; ++hv)
      for (index_t d = 0; d < p.V; ++d) {
        const index_t b = p.cu.empty() ? s : 0, t0 = p.cu.empty() ? 0 : p.cu[std::size_t(s)];
        const index_t t1 = p.cu.empty() ? p.T : p.cu[std::size_t(s) + 1], h = hv / (p.HV / p.H);
        const std::size_t state_at = std::size_t((s * p.HV + hv) * p.K) * std::size_t(p.V) + std::size_t(d);
        std::vector<double> st(std::size_t(p.K), 0.0);
        for (index_t n = 0; n < p.K && !p.s0.empty(); ++n) st[std::size_t(n)] = p.s0[state_at + std::size_t(n * p.V)];
        for (index_t t = t0; t < t1; ++t) {
          const std::size_t at = std::size_t(((b * p.T + t) * p.HV + hv) * p.V + d);
          double delta = p.dt[at] + (p.dt_bias.empty() ? 0.0 : p.dt_bias[std::size_t(hv * p.V + d)]);
          if (p.softplus) delta = std::log1p(std::exp(delta));
          double y = 0;
          for (index_t n = 0; n < p.K; ++n) {
            const std::size_t bc = std::size_t(((b * p.T + t) * p.H + h) * p.K + n);
            const double a = p.A[std::size_t((hv * p.V + d) * p.K + n)];
            double& e = st[std::size_t(n)];
            e = std::exp(delta * a) * e + delta * p.Bm[bc] * p.x[at];
            y += (p.scale == 0 ? 1.0 : p.scale) * p.Cm[bc] * e;
          }
          if (!p.D.empty()) y += p.D[std::size_t(hv * p.V + d)] * p.x[at];
          if (!p.z.empty()) y *= p.z[at] / (1.0 + std::exp(-p.z[at]));
          r.y[at] = y;
        }
        for (index_t n = 0; n < p.K; ++n) r.s[state_at + std::size_t(n * p.V)] = st[std::size_t(n)];
      }
  return r;
}

using harness::form;

template <class T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

/// Runs one form with scalar type T (decode: token by token from the initial state).
template <class T>
sresult run(form f, const sproblem& p, index_t chunk = 16, int threads = 0) {
  using A = la::state_t<T>;
  auto x = as<T>(p.x), dt = as<T>(p.dt), z = as<T>(p.z), Bm = as<T>(p.Bm), Cm = as<T>(p.Cm);
  auto Ar = as<T>(p.A), D = as<T>(p.D), bias = as<T>(p.dt_bias);
  std::vector<A> s0(p.s0.begin(), p.s0.end()), s1(std::size_t(p.N() * p.HV * p.K * p.V), A(-5));
  std::vector<T> out(p.x.size(), T(-5));
  la::options<A> opt;
  opt.chunk_size = chunk;
  opt.threads = threads;
  if (p.scale != 0) opt.scale = p.scale;
  if (!p.s0.empty()) opt.initial_state = la::view<const A>(s0.data(), p.N(), p.HV, p.K, p.V);
  opt.final_state = la::view(s1.data(), p.N(), p.HV, p.K, p.V);
  if (!p.cu.empty()) opt.cu_seqlens = la::view(p.cu.data(), index_t(p.cu.size()));
  const auto tok = [&](auto& v, index_t heads, index_t dim, index_t t0, index_t len) {
    return la::tensor_view<const T, 4>(v.data() + t0 * heads * dim, {p.B, len, heads, dim},
                                       {p.T * heads * dim, heads * dim, dim, 1});
  };
  const auto in_at = [&](index_t t0, index_t len) {
    la::Mamba::inputs<T> in{.q = tok(Cm, p.H, p.K, t0, len), .k = tok(Bm, p.H, p.K, t0, len),
                            .v = tok(x, p.HV, p.V, t0, len), .dt = tok(dt, p.HV, p.V, t0, len),
                            .A = la::view<const T>(Ar.data(), p.HV, p.V, p.K)};
    if (!D.empty()) in.D = la::view<const T>(D.data(), p.HV, p.V);
    if (!z.empty()) in.z = tok(z, p.HV, p.V, t0, len);
    if (!bias.empty()) in.dt_bias = la::view<const T>(bias.data(), p.HV, p.V);
    in.delta_softplus = p.softplus;
    return in;
  };
  const auto o_at = [&](index_t t0, index_t len) {
    return la::tensor_view<T, 4>(out.data() + t0 * p.HV * p.V, {p.B, len, p.HV, p.V}, {p.T * p.HV * p.V, p.HV * p.V, p.V, 1});
  };
  if (f == form::decode) {  // decode_step updates its state in place, from s0
    REQUIRE(p.cu.empty());
    if (!p.s0.empty()) std::copy(s0.begin(), s0.end(), s1.begin());
    else std::fill(s1.begin(), s1.end(), A(0));
  }
  harness::run_slices<la::Mamba>(f, p.T, in_at, o_at, la::view(s1.data(), p.N(), p.HV, p.K, p.V), opt);
  return {std::vector<double>(out.begin(), out.end()), std::vector<double>(s1.begin(), s1.end())};
}

}  // namespace

TEMPLATE_TEST_CASE("Mamba: every form matches the float64 S6 recurrence (odd T, N != V, grouped heads)", "[mamba]",
                   float, double) {
  std::mt19937_64 rng(21);
  for (bool softplus : {true, false})
    for (bool extras : {true, false}) {
      auto p = make(rng, {}, {.softplus = softplus, .skip = extras, .gate = extras, .state = extras});
      if (extras) p.scale = 0.3;
      const auto want = reference(p);
      for (form f : harness::all_forms)
        for (index_t C : {1, 16, 64}) {
          if (f != form::chunkwise && C != 16) continue;
          CAPTURE(harness::name(f), C, softplus, extras);
          const auto got = run<TestType>(f, p, C);
          CHECK(harness::rel_err(got.y, want.y) < harness::tolerance<TestType>());
          CHECK(harness::rel_err(got.s, want.s) < harness::tolerance<TestType>());
        }
    }
}

TEMPLATE_TEST_CASE("Mamba: 32 and more channels per head (the chunk kernel's register blocks and remainder)",
                   "[mamba]", float, double) {
  std::mt19937_64 rng(22);
  sproblem shape;
  shape.B = 1, shape.T = 45, shape.H = 1, shape.HV = 2, shape.K = 3, shape.V = 37;  // a block of 32 + 5
  const auto p = make(rng, shape, {});
  const auto want = reference(p);
  for (form f : harness::all_forms) {
    CAPTURE(harness::name(f));
    const auto got = run<TestType>(f, p, 32);
    CHECK(harness::rel_err(got.y, want.y) < harness::tolerance<TestType>());
    CHECK(harness::rel_err(got.s, want.s) < harness::tolerance<TestType>());
  }
}

TEMPLATE_TEST_CASE("Mamba: a packed batch (empty and one-token sequences) with initial states", "[mamba][varlen]", float,
                   double) {
  std::mt19937_64 rng(23);
  sproblem shape;
  shape.B = 1, shape.T = 91, shape.cu = {0, 1, 1, 40, 41, 91};
  const auto p = make(rng, shape, {});
  const auto want = reference(p);
  for (form f : {form::recurrent, form::chunkwise, form::parallel}) {
    CAPTURE(harness::name(f));
    const auto got = run<TestType>(f, p, 16);
    CHECK(harness::rel_err(got.y, want.y) < harness::tolerance<TestType>());
    CHECK(harness::rel_err(got.s, want.s) < harness::tolerance<TestType>());
  }
}

TEMPLATE_TEST_CASE("Mamba: decays down to exp(-1e4), Delta = 0 and A = 0 stay finite and exact", "[mamba][robustness]",
                   float, double) {
  std::mt19937_64 rng(24);
  auto p = make(rng, {}, {.softplus = false, .dt_mean = 0.0, .dt_sd = 100.0, .a_lo = 0.0, .a_hi = 100.0});
  for (std::size_t i = 0; i < p.dt.size(); i += 5) p.dt[i] = 0.0;  // no step: keep the state, write nothing
  for (std::size_t i = 3; i < p.A.size(); i += 9) p.A[i] = 0.0;    // a state element that never decays
  for (std::size_t i = 1; i < p.dt.size(); i += 7) p.dt[i] = 1e-3;  // weak steps between the strong ones
  const auto want = reference(p);
  for (form f : harness::all_forms) {
    CAPTURE(harness::name(f));
    const auto got = run<TestType>(f, p, 16);
    CHECK(std::all_of(got.y.begin(), got.y.end(), [](double e) { return std::isfinite(e); }));
    CHECK(harness::rel_err(got.y, want.y) < harness::tolerance<TestType>());
    CHECK(harness::rel_err(got.s, want.s) < harness::tolerance<TestType>());
  }
}

TEMPLATE_TEST_CASE("Mamba with Delta shared by a head's channels and A[d, n] = a_h is Mamba-2 (ScalarDecay)",
                   "[mamba][mamba2]", float, double) {
  using T = TestType;
  using A = la::state_t<T>;
  std::mt19937_64 rng(25);
  std::normal_distribution<double> normal;
  const index_t B = 2, L = 29, H = 1, HV = 3, K = 6, V = 5;
  const auto draw = [&](index_t n, double sd) {
    std::vector<T> v(static_cast<std::size_t>(n));
    for (auto& e : v) e = static_cast<T>(sd * normal(rng));
    return v;
  };
  auto x = draw(B * L * HV * V, 1), dt = draw(B * L * HV, 2), bias = draw(HV, 1), A_log = draw(HV, 1);
  auto Bm = draw(B * L * H * K, 1), Cm = draw(B * L * H * K, 1);
  std::vector<A> s0(std::size_t(B * HV * K * V));
  for (auto& e : s0) e = static_cast<A>(normal(rng));
  std::vector<T> A_head(static_cast<std::size_t>(HV));
  for (index_t h = 0; h < HV; ++h) A_head[std::size_t(h)] = static_cast<T>(-std::exp(double(A_log[std::size_t(h)])));
  // Mamba: dt [B, T, HV, V], dt_bias and A broadcast over the channels (and states) by stride 0.
  la::Mamba::inputs<T> mamba{.q = la::view<const T>(Cm.data(), B, L, H, K), .k = la::view<const T>(Bm.data(), B, L, H, K),
                             .v = la::view<const T>(x.data(), B, L, HV, V),
                             .dt = la::view<const T>(dt.data(), {B, L, HV, V}, {L * HV, HV, 1, 0}),
                             .A = la::view<const T>(A_head.data(), {HV, V, K}, {1, 0, 0})};
  mamba.dt_bias = la::view<const T>(bias.data(), {HV, V}, {1, 0});
  mamba.delta_softplus = true;
  // Mamba-2 through ScalarDecay: g = Delta a, v = Delta x.
  std::vector<T> g(std::size_t(B * L * HV)), v(x.size());
  la::mamba2_to_scalar_decay<T>(la::view<const T>(dt.data(), B, L, HV), la::view<const T>(bias.data(), HV),
                                la::view<const T>(A_log.data(), HV), la::view<const T>(x.data(), B, L, HV, V),
                                la::view(g.data(), B, L, HV), la::view(v.data(), B, L, HV, V));
  const la::ScalarDecay::inputs<T> ssd{.q = mamba.q, .k = mamba.k, .v = la::view<const T>(v.data(), B, L, HV, V),
                                       .g = la::view<const T>(g.data(), B, L, HV)};
  std::vector<T> y1(x.size(), T(-3)), y2(x.size(), T(-4));
  std::vector<A> f1(s0.size(), A(-3)), f2(s0.size(), A(-4));
  la::options<A> opt;
  opt.scale = 1;
  opt.chunk_size = 8;
  opt.initial_state = la::view<const A>(s0.data(), B, HV, K, V);
  opt.final_state = la::view(f1.data(), B, HV, K, V);
  la::chunkwise_forward<la::Mamba>(mamba, la::view(y1.data(), B, L, HV, V), opt);
  opt.final_state = la::view(f2.data(), B, HV, K, V);
  la::chunkwise_forward<la::ScalarDecay>(ssd, la::view(y2.data(), B, L, HV, V), opt);
  const auto d = [](const auto& a) { return std::vector<double>(a.begin(), a.end()); };
  CHECK(harness::rel_err(d(y1), d(y2)) < harness::tolerance<T>());
  CHECK(harness::rel_err(d(f1), d(f2)) < harness::tolerance<T>());
}

TEST_CASE("Mamba: results do not depend on the thread count, and two calls equal one", "[mamba][threads][state]") {
  std::mt19937_64 rng(26);
  const auto p = make(rng, {}, {});
  for (form f : {form::recurrent, form::chunkwise, form::parallel}) {
    CAPTURE(harness::name(f));
    const auto one = run<float>(f, p, 16, 1), two = run<float>(f, p, 16, 2), three = run<float>(f, p, 16, 3);
    CHECK(one.y == two.y);
    CHECK(one.y == three.y);
    CHECK(one.s == two.s);
  }
  // The first 23 tokens, then the rest from the state they leave (C = 16: a chunk boundary inside).
  const index_t split = 23;
  const auto cut = [&](const std::vector<double>& v, index_t per, index_t t0, index_t t1) {
    std::vector<double> y;
    for (index_t b = 0; b < p.B; ++b) y.insert(y.end(), v.begin() + (b * p.T + t0) * per, v.begin() + (b * p.T + t1) * per);
    return y;
  };
  auto head = p, tail = p;
  for (auto* part : {&head, &tail}) {
    const index_t t0 = part == &head ? 0 : split, t1 = part == &head ? split : p.T;
    part->T = t1 - t0;
    part->x = cut(p.x, p.HV * p.V, t0, t1), part->dt = cut(p.dt, p.HV * p.V, t0, t1), part->z = cut(p.z, p.HV * p.V, t0, t1);
    part->Bm = cut(p.Bm, p.H * p.K, t0, t1), part->Cm = cut(p.Cm, p.H * p.K, t0, t1);
  }
  const auto whole = run<double>(form::chunkwise, p, 16);
  tail.s0 = run<double>(form::chunkwise, head, 16).s;
  const auto second = run<double>(form::chunkwise, tail, 16);
  CHECK(harness::rel_err(second.y, cut(whole.y, p.HV * p.V, split, p.T)) < 1e-12);
  CHECK(harness::rel_err(second.s, whole.s) < 1e-12);
}

TEST_CASE("Mamba: bad arguments are rejected naming the argument, before anything is written", "[mamba][validation]") {
  const index_t B = 2, L = 5, H = 1, HV = 2, K = 3, V = 4;
  std::vector<float> bc(std::size_t(B * L * H * K), 0.5f), x(std::size_t(B * L * HV * V), 0.5f), dt(x.size(), 0.25f);
  std::vector<float> A(std::size_t(HV * V * K), -1.0f), D(std::size_t(HV * V), 1.0f), out(x.size(), 7.0f);
  la::Mamba::inputs<float> good{.q = la::view<const float>(bc.data(), B, L, H, K), .k = la::view<const float>(bc.data(), B, L, H, K),
                                .v = la::view<const float>(x.data(), B, L, HV, V), .dt = la::view<const float>(dt.data(), B, L, HV, V),
                                .A = la::view<const float>(A.data(), HV, V, K)};
  const auto o = la::view(out.data(), B, L, HV, V);
  const auto untouched = [&] { return std::all_of(out.begin(), out.end(), [](float e) { return e == 7.0f; }); };
  auto in = good;
  in.A = la::view<const float>(A.data(), HV, K, V);  // [HV, K, V]: the state's layout, not A's
  CHECK_THROWS_WITH(la::chunkwise_forward<la::Mamba>(in, o), Catch::Contains("'A'") && Catch::Contains("[HV, V, K]"));
  in = good;
  in.dt = la::view<const float>(dt.data(), B, L, HV, 1);
  CHECK_THROWS_WITH(la::recurrent_forward<la::Mamba>(in, o), Catch::Contains("'dt'") && Catch::Contains("[B, T, HV, V]"));
  in = good;
  in.D = la::view<const float>(D.data(), V, HV);
  CHECK_THROWS_WITH(la::parallel_forward<la::Mamba>(in, o), Catch::Contains("'D'") && Catch::Contains("[HV, V]"));
  in = good;
  in.dt_bias = la::view<const float>(D.data(), 1, V);
  CHECK_THROWS_WITH(la::chunkwise_forward<la::Mamba>(in, o), Catch::Contains("'dt_bias'"));
  in = good;
  in.z = la::view<const float>(x.data(), B, L, HV, V - 1);
  CHECK_THROWS_WITH(la::chunkwise_forward<la::Mamba>(in, o), Catch::Contains("'z'"));
  A[5] = 0.5f;  // a growing state element
  CHECK_THROWS_WITH(la::chunkwise_forward<la::Mamba>(good, o), Catch::Contains("'A'") && Catch::Contains("<= 0"));
  A[5] = -1.0f;
  dt[3] = -0.5f;  // a negative step, caught by the input scan
  la::options<float> opt;
  opt.check_finite = true;
  CHECK_THROWS_WITH(la::chunkwise_forward<la::Mamba>(good, o, opt), Catch::Contains("'dt'") && Catch::Contains("negative"));
  CHECK(untouched());
  dt[3] = 0.25f;
  CHECK_NOTHROW(la::chunkwise_forward<la::Mamba>(good, o, opt));
  CHECK(!untouched());
}

TEST_CASE("Mamba decode on a state pool: sequences read and write their slots, padding steps from zero", "[mamba][serving]") {
  using A = double;
  std::mt19937_64 rng(27);
  sproblem shape;
  shape.B = 3, shape.T = 9;
  const auto p = make(rng, shape, {});  // p.s0 [3, HV, K, V]: the start states of the sequences
  const index_t P = 5, per = p.HV * p.K * p.V;
  const std::int64_t slots[] = {3, -1, 0};  // sequence 1 is padding: zero state, nothing written
  std::vector<A> pool(std::size_t(P * per));
  std::normal_distribution<double> normal;
  for (auto& e : pool) e = normal(rng);
  for (index_t n : {0, 2})
    std::copy(p.s0.begin() + n * per, p.s0.begin() + (n + 1) * per, pool.begin() + slots[n] * per);
  const std::vector<A> before = pool;
  auto zero_start = p;
  std::fill(zero_start.s0.begin() + per, zero_start.s0.begin() + 2 * per, 0.0);
  const auto want = reference(zero_start);
  auto x = p.x, dt = p.dt, z = p.z, Bm = p.Bm, Cm = p.Cm, Ar = p.A, D = p.D, bias = p.dt_bias;
  std::vector<double> out(x.size(), -5.0);
  la::options<A> opt;
  opt.state_indices = la::view(slots, 3);
  const auto tok = [&](std::vector<double>& v, index_t heads, index_t dim, index_t t) {
    return la::tensor_view<const double, 4>(v.data() + t * heads * dim, {p.B, 1, heads, dim}, {p.T * heads * dim, heads * dim, dim, 1});
  };
  for (index_t t = 0; t < p.T; ++t) {
    la::Mamba::inputs<double> in{.q = tok(Cm, p.H, p.K, t), .k = tok(Bm, p.H, p.K, t), .v = tok(x, p.HV, p.V, t),
                                 .dt = tok(dt, p.HV, p.V, t), .A = la::view<const double>(Ar.data(), p.HV, p.V, p.K),
                                 .D = la::view<const double>(D.data(), p.HV, p.V), .z = tok(z, p.HV, p.V, t),
                                 .dt_bias = la::view<const double>(bias.data(), p.HV, p.V), .delta_softplus = true};
    const la::tensor_view<double, 4> o(out.data() + t * p.HV * p.V, {p.B, 1, p.HV, p.V}, {p.T * p.HV * p.V, p.HV * p.V, p.V, 1});
    la::decode_step<la::Mamba>(in, o, la::view(pool.data(), P, p.HV, p.K, p.V), opt);
  }
  // Sequences 0 and 2 throughout; the padding sequence restarts from zero at every step, so
  // only its first token is the reference's.
  const index_t row = p.T * per / p.K;  // outputs of one sequence: T HV V
  for (index_t n : {0, 2}) {
    const std::vector<double> got(out.begin() + n * row, out.begin() + (n + 1) * row);
    CHECK(harness::rel_err(got, std::vector<double>(want.y.begin() + n * row, want.y.begin() + (n + 1) * row)) < 1e-12);
  }
  const index_t first = p.HV * p.V;
  CHECK(harness::rel_err(std::vector<double>(out.begin() + row, out.begin() + row + first),
                         std::vector<double>(want.y.begin() + row, want.y.begin() + row + first)) < 1e-12);
  for (index_t n : {0, 2}) {
    const std::vector<double> got(pool.begin() + slots[n] * per, pool.begin() + (slots[n] + 1) * per);
    const std::vector<double> end(want.s.begin() + n * per, want.s.begin() + (n + 1) * per);
    CHECK(harness::rel_err(got, end) < 1e-12);
  }
  for (index_t slot : {1, 2, 4})  // no sequence's slot: untouched
    CHECK(std::equal(pool.begin() + slot * per, pool.begin() + (slot + 1) * per, before.begin() + slot * per));
}

TEST_CASE("Mamba on the official selective_scan_fn layout through strided views, no copies", "[mamba][layout]") {
  // u, delta, z [batch, dim, L]; A [dim, N]; B, C [batch, G, N, L]; D, delta_bias [dim];
  // last state [batch, dim, N]: channel c = hv V + d, groups G = H.
  std::mt19937_64 rng(28);
  const auto p = make(rng, {}, {.state = false});
  const index_t dim = p.HV * p.V, L = p.T;
  const auto channel_major = [&](const std::vector<double>& v) {  // [B, T, HV, V] -> [B, dim, L]
    std::vector<double> o(v.size());
    for (index_t b = 0; b < p.B; ++b)
      for (index_t t = 0; t < L; ++t)
        for (index_t c = 0; c < dim; ++c) o[std::size_t((b * dim + c) * L + t)] = v[std::size_t((b * L + t) * dim + c)];
    return o;
  };
  const auto group_major = [&](const std::vector<double>& v) {  // [B, T, H, K] -> [B, H, K, L]
    std::vector<double> o(v.size());
    for (index_t b = 0; b < p.B; ++b)
      for (index_t t = 0; t < L; ++t)
        for (index_t i = 0; i < p.H * p.K; ++i) o[std::size_t((b * p.H * p.K + i) * L + t)] = v[std::size_t((b * L + t) * p.H * p.K + i)];
    return o;
  };
  const auto u = channel_major(p.x), delta = channel_major(p.dt), z = channel_major(p.z);
  const auto Bo = group_major(p.Bm), Co = group_major(p.Cm);
  const la::index_t tok[] = {dim * L, 1, p.V * L, L}, grp[] = {p.H * p.K * L, 1, p.K * L, L};
  const auto per_token = [&](const std::vector<double>& v, const la::index_t (&st)[4], index_t heads, index_t D) {
    return la::view<const double>(v.data(), {p.B, L, heads, D}, st);
  };
  la::Mamba::inputs<double> in{.q = per_token(Co, grp, p.H, p.K), .k = per_token(Bo, grp, p.H, p.K),
                               .v = per_token(u, tok, p.HV, p.V), .dt = per_token(delta, tok, p.HV, p.V),
                               .A = la::view<const double>(p.A.data(), p.HV, p.V, p.K),  // [dim, N] as it is
                               .D = la::view<const double>(p.D.data(), p.HV, p.V), .z = per_token(z, tok, p.HV, p.V),
                               .dt_bias = la::view<const double>(p.dt_bias.data(), p.HV, p.V), .delta_softplus = true};
  std::vector<double> out(u.size(), -5.0), last(std::size_t(p.B * dim * p.K), -5.0);
  la::options<double> opt;
  opt.chunk_size = 16;
  opt.final_state = la::view(last.data(), {p.B, p.HV, p.K, p.V}, {dim * p.K, p.V * p.K, 1, p.K});
  la::chunkwise_forward<la::Mamba>(in, la::view(out.data(), {p.B, L, p.HV, p.V}, {dim * L, 1, p.V * L, L}), opt);
  const auto want = reference(p);
  CHECK(harness::rel_err(out, channel_major(want.y)) < 1e-12);
  std::vector<double> want_last(last.size());
  for (index_t b = 0; b < p.B; ++b)
    for (index_t c = 0; c < dim; ++c)
      for (index_t n = 0; n < p.K; ++n)
        want_last[std::size_t((b * dim + c) * p.K + n)] =
            want.s[std::size_t(((b * p.HV + c / p.V) * p.K + n) * p.V + c % p.V)];
  CHECK(harness::rel_err(last, want_last) < 1e-12);
}
