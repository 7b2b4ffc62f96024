// SPDX-License-Identifier: MIT
// Mamba-2 through ScalarDecay (docs/math.md#mamba2): mamba2_to_scalar_decay's inputs, run by the
// ScalarDecay forms, against the SSD recurrence written out here in float64 from Mamba-2's
// parameters; and its argument checks.
#include <cmath>
#include <random>
#include <vector>

#include "support/catch.hpp"
#include "support/harness.hpp"

#include <linattn/rules/mamba2.hpp>

namespace {
namespace la = linattn;
using la::index_t;

struct ssd_problem {
  index_t B = 2, T = 37, G = 2, HV = 4, N = 6, P = 5;  // G q/k groups (C, B heads), N state, P head dim
  std::vector<double> x, dt, dt_bias, A_log, Bm, Cm, s0;  // x [B,T,HV,P], dt [B,T,HV], Bm/Cm [B,T,G,N], s0 [B,HV,N,P]
};

ssd_problem make(std::mt19937_64& rng) {
  ssd_problem p;
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> unit(-1.0, 1.5);
  auto fill = [&](std::vector<double>& v, index_t n, auto&& draw) {
    v.resize(std::size_t(n));
    for (auto& e : v) e = draw();
  };
  fill(p.x, p.B * p.T * p.HV * p.P, [&] { return normal(rng); });
  fill(p.dt, p.B * p.T * p.HV, [&] { return 2.0 * normal(rng); });
  fill(p.dt_bias, p.HV, [&] { return normal(rng); });
  fill(p.A_log, p.HV, [&] { return unit(rng); });
  fill(p.Bm, p.B * p.T * p.G * p.N, [&] { return normal(rng); });
  fill(p.Cm, p.B * p.T * p.G * p.N, [&] { return normal(rng); });
  fill(p.s0, p.B * p.HV * p.N * p.P, [&] { return normal(rng); });
  return p;
}

/// y_t = S_t C_t with S_t = exp(Delta_t A) S_{t-1} + Delta_t x_t B_t^T, S [P, N], from S0.
std::vector<double> ssd_reference(const ssd_problem& p) {
  std::vector<double> y(std::size_t(p.B * p.T * p.HV * p.P));
  for (index_t b = 0; b < p.B; ++b)
    for (index_t h = 0; h < p.HV; ++h) {
      const index_t grp = h / (p.HV / p.G);
      std::vector<double> S(std::size_t(p.P * p.N));
      for (index_t i = 0; i < p.P; ++i)
        for (index_t n = 0; n < p.N; ++n) S[std::size_t(i * p.N + n)] = p.s0[std::size_t(((b * p.HV + h) * p.N + n) * p.P + i)];
      for (index_t t = 0; t < p.T; ++t) {
        const double z = p.dt[std::size_t((b * p.T + t) * p.HV + h)] + p.dt_bias[std::size_t(h)];
        const double delta = std::log(1.0 + std::exp(z)), a = -std::exp(p.A_log[std::size_t(h)]);
        const auto tok = [&](const std::vector<double>& m, index_t n) { return m[std::size_t(((b * p.T + t) * p.G + grp) * p.N + n)]; };
        for (index_t i = 0; i < p.P; ++i) {
          const double xi = p.x[std::size_t(((b * p.T + t) * p.HV + h) * p.P + i)];
          double acc = 0;
          for (index_t n = 0; n < p.N; ++n) {
            double& s = S[std::size_t(i * p.N + n)];
            s = std::exp(delta * a) * s + delta * xi * tok(p.Bm, n);
            acc += s * tok(p.Cm, n);
          }
          y[std::size_t(((b * p.T + t) * p.HV + h) * p.P + i)] = acc;
        }
      }
    }
  return y;
}

template <class T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}
}  // namespace

TEMPLATE_TEST_CASE("Mamba-2 parameters through ScalarDecay match the SSD recurrence", "[mamba2]", float, double) {
  using T = TestType;
  std::mt19937_64 rng(2024);
  const ssd_problem p = make(rng);
  const auto want = ssd_reference(p);
  auto x = as<T>(p.x), dt = as<T>(p.dt), dt_bias = as<T>(p.dt_bias), A_log = as<T>(p.A_log);
  auto Bm = as<T>(p.Bm), Cm = as<T>(p.Cm);
  auto s0 = as<la::state_t<T>>(p.s0);
  std::vector<T> g(dt.size()), v(x.size());
  la::mamba2_to_scalar_decay<T>(la::view(dt.data(), p.B, p.T, p.HV), la::view(dt_bias.data(), p.HV),
                                la::view(A_log.data(), p.HV), la::view(x.data(), p.B, p.T, p.HV, p.P),
                                la::view(g.data(), p.B, p.T, p.HV), la::view(v.data(), p.B, p.T, p.HV, p.P));
  const la::ScalarDecay::inputs<T> in{.q = la::view<const T>(Cm.data(), p.B, p.T, p.G, p.N),
                                      .k = la::view<const T>(Bm.data(), p.B, p.T, p.G, p.N),
                                      .v = la::view<const T>(v.data(), p.B, p.T, p.HV, p.P),
                                      .g = la::view<const T>(g.data(), p.B, p.T, p.HV)};
  la::options<la::state_t<T>> opt;
  opt.scale = 1;  // SSD reads the state with C as it is
  opt.chunk_size = 16;
  opt.initial_state = la::view<const la::state_t<T>>(s0.data(), p.B, p.HV, p.N, p.P);
  for (int f = 0; f < 2; ++f) {
    std::vector<T> out(x.size(), T(-7));
    const auto o = la::view(out.data(), p.B, p.T, p.HV, p.P);
    if (f == 0) la::chunkwise_forward<la::ScalarDecay>(in, o, opt);
    else la::recurrent_forward<la::ScalarDecay>(in, o, opt);
    CAPTURE(f);
    CHECK(harness::rel_err(std::vector<double>(out.begin(), out.end()), want) < harness::tolerance<T>());
  }
}

TEST_CASE("mamba2_to_scalar_decay names a bad argument and writes nothing", "[mamba2][validation]") {
  std::mt19937_64 rng(5);
  const ssd_problem p = make(rng);
  auto x = p.x, dt = p.dt, dt_bias = p.dt_bias, A_log = p.A_log;
  std::vector<double> g(dt.size(), 3.0), v(x.size(), 3.0);
  const auto untouched = [&] { return std::all_of(g.begin(), g.end(), [](double e) { return e == 3.0; }); };
  const auto dtv = la::view<const double>(dt.data(), p.B, p.T, p.HV);
  const auto xv = la::view<const double>(x.data(), p.B, p.T, p.HV, p.P);
  const auto call = [&](index_t bias_len, double* g_data, double* v_data) {
    la::mamba2_to_scalar_decay<double>(dtv, la::view<const double>(dt_bias.data(), bias_len),
                                       la::view<const double>(A_log.data(), p.HV), xv, la::view(g_data, p.B, p.T, p.HV),
                                       la::view(v_data, p.B, p.T, p.HV, p.P));
  };
  CHECK_THROWS_WITH(call(p.HV - 1, g.data(), v.data()), Catch::Contains("dt_bias") && Catch::Contains("[HV]"));
  CHECK(untouched());
  CHECK_THROWS_WITH(call(p.HV, g.data(), x.data() + 1), Catch::Contains("v overlaps the input x"));
  CHECK(untouched());
  CHECK_THROWS_WITH(call(p.HV, dt.data(), v.data()), Catch::Contains("g overlaps the input dt"));
  const auto negative = la::view<const double>(dt.data(), p.B, -p.T, p.HV);
  CHECK_THROWS_WITH(la::mamba2_to_scalar_decay<double>(negative, la::view<const double>(dt_bias.data(), p.HV),
                                                       la::view<const double>(A_log.data(), p.HV), xv,
                                                       la::view(g.data(), p.B, p.T, p.HV), la::view(v.data(), p.B, p.T, p.HV, p.P)),
                    Catch::Contains("dt has shape") && Catch::Contains("negative extent"));
  CHECK(untouched());
  CHECK_NOTHROW(call(p.HV, g.data(), x.data()));  // v = x in place
  CHECK(!untouched());
}
