// SPDX-License-Identifier: MIT
// Longhorn's diagonal rule, as its official code runs it (docs/math.md#longhorn-official). The
// forms against the float64 loop run in test_forms.cpp and test_properties.cpp (it is one of
// the additive cases); here R7 (it equals the exact Longhorn on one-hot keys and not on dense
// keys), the official module's channel layout (V = 1 value heads sharing one key head) and
// validation.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "support/cases.hpp"
#include "support/catch.hpp"

using namespace harness;

namespace {
const ref::dims shape{.B = 2, .T = 41, .H = 2, .HV = 4, .K = 8, .V = 6};

/// Every key becomes a multiple of one coordinate vector (its largest entry kept).
void one_hot_keys(ref::problem& p) {
  const std::size_t K = std::size_t(p.d.K);
  for (std::size_t r = 0; r < p.k.size(); r += K) {
    std::size_t m = r;
    for (std::size_t i = r; i < r + K; ++i)
      if (std::abs(p.k[i]) > std::abs(p.k[m])) m = i;
    for (std::size_t i = r; i < r + K; ++i)
      if (i != m) p.k[i] = 0.0;
  }
}
}  // namespace

TEMPLATE_TEST_CASE("R7: LonghornDiagonal is exact Longhorn on one-hot keys, and not on dense keys", "[longhorn][reductions]",
                   float, double) {
  using T = TestType;
  std::mt19937_64 rng(61);
  auto p = make_problem(rng, shape, spec_of<la::Longhorn>());  // raw keys, delta = exp(N(0,1))
  const auto dense = p;
  one_hot_keys(p);
  for (form f : all_forms) {
    CAPTURE(name(f));
    const auto exact = run<la::Longhorn, T>(f, p, {.chunk = 16});
    const auto diagonal = run<la::LonghornDiagonal, T>(f, p, {.chunk = 16});
    CHECK(rel_err(diagonal.r.o, exact.r.o) < tolerance<T>());
    CHECK(rel_err(diagonal.r.s, exact.r.s) < tolerance<T>());
    const auto exact_dense = run<la::Longhorn, T>(f, dense, {.chunk = 16});
    const auto diagonal_dense = run<la::LonghornDiagonal, T>(f, dense, {.chunk = 16});
    CHECK(rel_err(diagonal_dense.r.o, exact_dense.r.o) > 1e-2);
  }
}

TEMPLATE_TEST_CASE("LonghornDiagonal in the official module's layout: channels are V = 1 value heads of one key head",
                   "[longhorn]", float, double) {
  // d_inner = 12 channels, d_state = 16, no query scaling, delta = sigmoid(N(0,1)) as the
  // module's sigmoid(dt + bias).
  using T = TestType;
  std::mt19937_64 rng(62);
  auto p = make_problem(rng, {.B = 1, .T = 77, .H = 1, .HV = 12, .K = 16, .V = 1}, spec_of<la::LonghornDiagonal>());
  for (auto& x : p.beta) x = 1.0 / (1.0 + 1.0 / x);  // exp(N) -> sigmoid(N)
  p.scale = 1.0;
  const auto want = ref::run(p);
  for (form f : all_forms) {
    CAPTURE(name(f));
    expect_matches<T>(run<la::LonghornDiagonal, T>(f, p, {.chunk = 16, .explicit_scale = true}), want);
  }
}

TEMPLATE_TEST_CASE("LonghornDiagonal: strong decays from large delta and concentrated keys", "[longhorn][gates]", float, double) {
  // delta = 1e6 with one-hot keys: the gate of the key's dimension is log(1 / (1 + 1e6 k^2)),
  // about -14 to -30 per token, beside gates of exactly 0.
  using T = TestType;
  std::mt19937_64 rng(63);
  auto p = make_problem(rng, shape, spec_of<la::LonghornDiagonal>());
  one_hot_keys(p);
  for (auto& x : p.beta) x = 1e6;
  const auto want = ref::run(p);
  for (form f : all_forms) {
    CAPTURE(name(f));
    expect_matches<T>(run<la::LonghornDiagonal, T>(f, p, {.chunk = 16}), want);
  }
}

TEST_CASE("LonghornDiagonal's gates: log1p_nonpositive within 4 ulp of std::log1p on [-1, 0]", "[longhorn][gates]") {
  // x = -10^u, u uniform in [-320, 0] (subnormal to -1), then the ends and their neighbours
  std::mt19937_64 rng(65);
  std::uniform_real_distribution<double> exponent(-320.0, 0.0);
  std::vector<double> xs{0.0, -0.0, -1.0, std::nextafter(-1.0, 0.0), -0.5, -std::numeric_limits<double>::denorm_min(),
                         -std::numeric_limits<double>::epsilon(), -std::numeric_limits<double>::epsilon() / 2,
                         -1.0 + 0x1p-30, std::nextafter(-0.5, -1.0), std::nextafter(-0.5, 0.0)};
  for (int i = 0; i < 200000; ++i) xs.push_back(-std::pow(10.0, exponent(rng)));
  double worst = 0.0, worst_x = 0.0;
  int wrong_kind = 0;  // not finite where std::log1p is, another sign, or not -inf where it is
  for (const double x : xs) {
    const double want = std::log1p(x), got = la::log1p_nonpositive(x);
    if (std::isinf(want) || !std::isfinite(got) || std::signbit(got) != std::signbit(want)) {
      if (got != want) ++wrong_kind;
      continue;
    }
    const double ulp = std::nextafter(std::abs(want), std::numeric_limits<double>::infinity()) - std::abs(want);
    if (std::abs(got - want) / ulp > worst) worst = std::abs(got - want) / ulp, worst_x = x;
  }
  INFO("largest error " << worst << " ulp, at x = " << worst_x);
  CHECK(wrong_kind == 0);
  CHECK(worst <= 4.0);
  CHECK(la::log1p_nonpositive(-1.0) == -std::numeric_limits<double>::infinity());
  CHECK(std::signbit(la::log1p_nonpositive(-0.0)));
}

TEST_CASE("LonghornDiagonal's key norm: squared_norm in double, the same bits for any stride", "[longhorn][gates]") {
  // Rows of 1 to 130 floats from 1e-3 to 1e3 long, contiguous and every third element of a
  // longer buffer: within the rounding bound of its additions (the squares of floats are exact
  // in double; each sum passes through at most n / 8 + 3 of them) of a long-double sum, and
  // the two layouts give the same bits.
  std::mt19937_64 rng(66);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<double> exponent(-3.0, 3.0);
  for (std::ptrdiff_t n = 1; n <= 130; ++n) {
    const float scale = float(std::pow(10.0, exponent(rng)));
    const auto m = static_cast<std::size_t>(n);
    std::vector<float> row(m), strided(3 * m, std::numeric_limits<float>::quiet_NaN());
    long double want = 0;
    for (std::size_t d = 0; d < m; ++d) {
      row[d] = strided[3 * d] = scale * normal(rng);
      want += static_cast<long double>(row[d]) * row[d];
    }
    const double got = la::squared_norm(row.data(), 1, n);
    CAPTURE(n);
    CHECK(std::abs(got - double(want)) <= double(n / 8 + 4) * std::numeric_limits<double>::epsilon() * double(want));
    CHECK(la::squared_norm(strided.data(), 3, n) == got);
  }
}

TEST_CASE("LonghornDiagonal validation names delta and writes nothing", "[longhorn][validation]") {
  std::mt19937_64 rng(64);
  const ref::dims d{.B = 1, .T = 6, .H = 1, .HV = 2, .K = 4, .V = 3};
  const auto p = make_problem(rng, d, spec_of<la::LonghornDiagonal>());
  std::vector<float> q(p.q.begin(), p.q.end()), k(p.k.begin(), p.k.end()), v(p.v.begin(), p.v.end());
  std::vector<float> delta(p.beta.begin(), p.beta.end());
  std::vector<float> out(std::size_t(d.T) * d.HV * d.V, std::numeric_limits<float>::quiet_NaN());
  la::LonghornDiagonal::inputs<float> in{.q = la::view<const float>(q.data(), 1, d.T, 1, d.K),
                                         .k = la::view<const float>(k.data(), 1, d.T, 1, d.K),
                                         .v = la::view<const float>(v.data(), 1, d.T, d.HV, d.V),
                                         .delta = la::view<const float>(delta.data(), 1, d.T, d.HV - 1)};
  auto expect_error = [&](const std::string& what, la::options<float> opt = {}) {
    CAPTURE(what);
    try {
      la::chunkwise_forward<la::LonghornDiagonal>(in, la::view(out.data(), 1, d.T, d.HV, d.V), opt);
      FAIL("no error");
    } catch (const la::error& e) {
      CHECK(std::string(e.what()).find(what) != std::string::npos);
    }
    CHECK(std::all_of(out.begin(), out.end(), [](float x) { return std::isnan(x); }));
  };
  expect_error("linattn::chunkwise_forward<LonghornDiagonal>: argument 'delta' has shape [1, 6, 1], expected [B, T, HV]");
  in.delta = la::view<const float>(delta.data(), 1, d.T, d.HV);
  delta[3] = -1.0f;
  la::options<float> finite;
  finite.check_finite = true;
  expect_error("'delta' holds a negative value", finite);
}
