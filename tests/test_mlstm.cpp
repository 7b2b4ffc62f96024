// SPDX-License-Identifier: MIT
// mLSTM (docs/math.md#mlstm): every form against a float64 reference written here from the
// xLSTM recurrence (stabilised, and unstabilised where exp(i~) fits a double), odd shapes,
// grouped value heads, a packed batch with carried state, hostile gates, thread independence,
// state carry and the state's shape check.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "support/catch.hpp"
#include "support/harness.hpp"

namespace {
namespace la = linattn;
using la::index_t;

struct mproblem {
  index_t B = 2, T = 41, H = 2, HV = 4, K = 8, V = 6;
  std::vector<std::int64_t> cu;                       // packed batch offsets (then B == 1)
  std::vector<double> q, k, v, ig, fg, s0;            // s0 [N, HV, K, V + 2] or empty
  index_t N() const { return cu.empty() ? B : index_t(cu.size()) - 1; }
};

mproblem make(std::mt19937_64& rng, mproblem p, double i_mean, double i_sd, double f_mean, bool with_s0) {
  std::normal_distribution<double> normal;
  auto fill = [&](std::vector<double>& x, index_t n, double mean, double sd) {
    x.resize(std::size_t(n));
    for (auto& e : x) e = mean + sd * normal(rng);
  };
  fill(p.q, p.B * p.T * p.H * p.K, 0, 1);
  fill(p.k, p.B * p.T * p.H * p.K, 0, 1);
  fill(p.v, p.B * p.T * p.HV * p.V, 0, 1);
  fill(p.ig, p.B * p.T * p.HV, i_mean, i_sd);
  fill(p.fg, p.B * p.T * p.HV, f_mean, 1.5);
  if (with_s0) {  // C~, n~ and a stabiliser per (sequence, head)
    fill(p.s0, p.N() * p.HV * p.K * (p.V + 2), 0, 1);
    for (index_t s = 0; s < p.N() * p.HV; ++s) {
      const double m = 2.0 * normal(rng);
      for (index_t i = 0; i < p.K; ++i) p.s0[std::size_t((s * p.K + i) * (p.V + 2) + p.V + 1)] = m;
    }
  }
  return p;
}

struct mresult {
  std::vector<double> o, s;  // [B, T, HV, V], [N, HV, K, V + 2] (unnormalised C, n, m = 0)
};

double lsig(double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }

/// The xLSTM recurrence per (sequence, value head), with C [V, K], n [K], scale on q:
/// stabilised (m_t = max(log f_t + m_{t-1}, i~_t)) or, for moderate gates, unstabilised.
mresult reference(const mproblem& p, bool stabilised) {
  mresult r;
  r.o.assign(std::size_t(p.B * p.T * p.HV * p.V), 0.0);
  r.s.assign(std::size_t(p.N() * p.HV * p.K * (p.V + 2)), 0.0);
  const double scale = 1.0 / std::sqrt(double(p.K));
  for (index_t s = 0; s < p.N(); ++s)
    for (index_t hv = 0; hv < p.HV; ++hv) {
      const index_t b = p.cu.empty() ? s : 0, t0 = p.cu.empty() ? 0 : p.cu[std::size_t(s)];
      const index_t t1 = p.cu.empty() ? p.T : p.cu[std::size_t(s) + 1], h = hv / (p.HV / p.H);
      std::vector<double> C(std::size_t(p.V * p.K), 0.0), n(std::size_t(p.K), 0.0);
      double m = 0;
      if (!p.s0.empty()) {
        const auto at = [&](index_t i, index_t j) { return p.s0[std::size_t(((s * p.HV + hv) * p.K + i) * (p.V + 2) + j)]; };
        m = at(0, p.V + 1);
        const double e = stabilised ? 1.0 : std::exp(m);  // the unstabilised state is exp(m) times the kept one
        for (index_t i = 0; i < p.K; ++i) {
          for (index_t j = 0; j < p.V; ++j) C[std::size_t(j * p.K + i)] = e * at(i, j);
          n[std::size_t(i)] = e * at(i, p.V);
        }
      }
      for (index_t t = t0; t < t1; ++t) {
        const std::size_t tok = std::size_t((b * p.T + t) * p.HV + hv);
        const double lf = lsig(p.fg[tok]), ig = p.ig[tok];
        double fw = std::exp(lf), iw = std::exp(ig), mn = 0;
        if (stabilised) {
          mn = std::max(lf + m, ig);
          fw = std::exp(lf + m - mn);
          iw = std::exp(ig - mn);
        }
        const auto kk = [&](index_t i) { return p.k[std::size_t(((b * p.T + t) * p.H + h) * p.K + i)]; };
        const auto qq = [&](index_t i) { return scale * p.q[std::size_t(((b * p.T + t) * p.H + h) * p.K + i)]; };
        double den = 0;
        for (index_t i = 0; i < p.K; ++i) {
          n[std::size_t(i)] = fw * n[std::size_t(i)] + iw * kk(i);
          den += n[std::size_t(i)] * qq(i);
        }
        const double d = stabilised ? std::max(std::abs(den), std::exp(-mn)) : std::max(std::abs(den), 1.0);
        for (index_t j = 0; j < p.V; ++j) {
          const double vj = p.v[std::size_t(((b * p.T + t) * p.HV + hv) * p.V + j)];
          double num = 0;
          for (index_t i = 0; i < p.K; ++i) {
            double& c = C[std::size_t(j * p.K + i)];
            c = fw * c + iw * vj * kk(i);
            num += c * qq(i);
          }
          r.o[std::size_t(((b * p.T + t) * p.HV + hv) * p.V + j)] = num / d;
        }
        if (stabilised) m = mn;
      }
      // The state as the unstabilised (C, n) (comparable whatever m each side keeps).
      const double e = stabilised ? std::exp(m) : 1.0;
      for (index_t i = 0; i < p.K; ++i) {
        for (index_t j = 0; j < p.V; ++j) r.s[std::size_t(((s * p.HV + hv) * p.K + i) * (p.V + 2) + j)] = e * C[std::size_t(j * p.K + i)];
        r.s[std::size_t(((s * p.HV + hv) * p.K + i) * (p.V + 2) + p.V)] = e * n[std::size_t(i)];
      }
    }
  return r;
}

using mform = harness::form;
using harness::name;

/// Runs one form with scalar type T; the returned state is unstabilised (C, n times exp(m)).
template <class T>
mresult run(mform f, const mproblem& p, index_t chunk = 16, int threads = 0) {
  using A = la::state_t<T>;
  auto cast = [](const std::vector<double>& x) { return std::vector<T>(x.begin(), x.end()); };
  auto q = cast(p.q), k = cast(p.k), v = cast(p.v), ig = cast(p.ig), fg = cast(p.fg);
  std::vector<A> s0(p.s0.begin(), p.s0.end()), s1(std::size_t(p.N() * p.HV * p.K * (p.V + 2)), A(-5));
  std::vector<T> out(p.v.size(), T(-5));
  la::options<A> opt;
  opt.chunk_size = chunk;
  opt.threads = threads;
  if (!p.s0.empty()) opt.initial_state = la::view<const A>(s0.data(), p.N(), p.HV, p.K, p.V + 2);
  opt.final_state = la::view(s1.data(), p.N(), p.HV, p.K, p.V + 2);
  if (!p.cu.empty()) opt.cu_seqlens = la::view(p.cu.data(), index_t(p.cu.size()));
  const auto in_at = [&](index_t t0, index_t len) {
    const auto tok = [&](auto& x, index_t heads, index_t D) {
      return la::tensor_view<const T, 4>(x.data() + t0 * heads * D, {p.B, len, heads, D}, {p.T * heads * D, heads * D, D, 1});
    };
    const auto gate = [&](auto& x) {
      return la::tensor_view<const T, 3>(x.data() + t0 * p.HV, {p.B, len, p.HV}, {p.T * p.HV, p.HV, 1});
    };
    return la::mLSTM::inputs<T>{.q = tok(q, p.H, p.K), .k = tok(k, p.H, p.K), .v = tok(v, p.HV, p.V), .i = gate(ig), .f = gate(fg)};
  };
  const auto o_at = [&](index_t t0, index_t len) {
    return la::tensor_view<T, 4>(out.data() + t0 * p.HV * p.V, {p.B, len, p.HV, p.V}, {p.T * p.HV * p.V, p.HV * p.V, p.V, 1});
  };
  if (f == mform::decode) {
    REQUIRE(p.cu.empty());
    if (!p.s0.empty()) std::copy(s0.begin(), s0.end(), s1.begin());
    else std::fill(s1.begin(), s1.end(), A(0));
  }
  harness::run_slices<la::mLSTM>(f, p.T, in_at, o_at, la::view(s1.data(), p.N(), p.HV, p.K, p.V + 2), opt);
  mresult r{std::vector<double>(out.begin(), out.end()), std::vector<double>(s1.begin(), s1.end())};
  for (index_t s = 0; s < p.N() * p.HV; ++s) {  // unstabilise: (C~, n~) exp(m), m column -> 0
    const double e = std::exp(r.s[std::size_t(s * p.K * (p.V + 2) + p.V + 1)]);
    for (index_t i = 0; i < p.K; ++i) {
      for (index_t j = 0; j <= p.V; ++j) r.s[std::size_t((s * p.K + i) * (p.V + 2) + j)] *= e;
      r.s[std::size_t((s * p.K + i) * (p.V + 2) + p.V + 1)] = 0;
    }
  }
  return r;
}

template <class T>
double tol() {
  return std::is_same_v<T, double> ? 1e-10 : 1e-4;
}
}  // namespace

TEST_CASE("mLSTM reference: stabilised and unstabilised recurrences agree for moderate gates", "[mlstm]") {
  std::mt19937_64 rng(1);
  const auto p = make(rng, {}, 0.0, 1.0, 1.0, true);
  const auto a = reference(p, true), b = reference(p, false);
  CHECK(harness::rel_err(a.o, b.o) < 1e-12);
  CHECK(harness::rel_err(a.s, b.s) < 1e-12);
}

TEMPLATE_TEST_CASE("mLSTM: every form matches the float64 reference (odd T, K != V, grouped heads, carried state)",
                   "[mlstm]", float, double) {
  std::mt19937_64 rng(2);
  for (bool s0 : {true, false}) {
    const auto p = make(rng, {}, 0.0, 2.0, 1.0, s0);
    const auto want = reference(p, true);
    for (mform f : {mform::recurrent, mform::chunkwise, mform::parallel, mform::decode})
      for (index_t C : {1, 16, 64}) {
        CAPTURE(name(f), C, s0);
        const auto got = run<TestType>(f, p, C);
        CHECK(harness::rel_err(got.o, want.o) < tol<TestType>());
        CHECK(harness::rel_err(got.s, want.s) < tol<TestType>());
      }
  }
}

TEMPLATE_TEST_CASE("mLSTM: a packed batch (empty and one-token sequences) with initial states", "[mlstm][varlen]", float,
                   double) {
  std::mt19937_64 rng(3);
  mproblem shape;
  shape.B = 1, shape.T = 150, shape.cu = {0, 1, 1, 70, 150};
  const auto p = make(rng, shape, 0.5, 2.0, 2.0, true);
  const auto want = reference(p, true);
  for (mform f : {mform::recurrent, mform::chunkwise, mform::parallel}) {
    CAPTURE(name(f));
    const auto got = run<TestType>(f, p, 32);
    CHECK(harness::rel_err(got.o, want.o) < tol<TestType>());
    CHECK(harness::rel_err(got.s, want.s) < tol<TestType>());
  }
}

TEST_CASE("mLSTM: input gates up to +300 and forget gates near 0 stay finite and match float64", "[mlstm][robustness]") {
  std::mt19937_64 rng(4);
  auto p = make(rng, {}, 40.0, 80.0, -2.0, true);  // exp(i~) far beyond float (and some beyond double)
  for (std::size_t t = 0; t < p.fg.size(); t += 7) p.fg[t] = -200.0;  // forget (almost) everything
  for (std::size_t t = 5; t < p.fg.size(); t += 13) p.fg[t] = -std::numeric_limits<double>::infinity();  // reset
  for (std::size_t t = 3; t < p.ig.size(); t += 11) p.ig[t] = 300.0;
  // Positive queries and keys: n^T q is a sum of positive terms, so h = C q / |n^T q| is well
  // conditioned (with mixed signs a denominator near 0 amplifies the inputs' float rounding).
  for (auto* x : {&p.q, &p.k})
    for (double& e : *x) e = std::abs(e) + 0.1;
  const auto want = reference(p, true);
  for (mform f : {mform::recurrent, mform::chunkwise, mform::parallel, mform::decode}) {
    CAPTURE(name(f));
    const auto got = run<float>(f, p, 16);
    CHECK(std::all_of(got.o.begin(), got.o.end(), [](double x) { return std::isfinite(x); }));
    CHECK(harness::rel_err(got.o, want.o) < 1e-4);
    const auto exact = run<double>(f, p, 16);
    CHECK(harness::rel_err(exact.o, want.o) < 1e-10);
  }
}

TEST_CASE("mLSTM: a long span through many forget gates of exactly 0 keeps float64 accuracy", "[mlstm][robustness]") {
  // Every sixth forget gate is 0 (f~ = -inf, log f floored at -1e4): over 600 tokens the
  // cumulative log forget reaches -1e6, whose double rounding alone would be 1e-10.
  std::mt19937_64 rng(6);
  mproblem shape;
  shape.B = 1, shape.T = 600, shape.H = 1, shape.HV = 2, shape.K = 5, shape.V = 3;
  auto p = make(rng, shape, 0.0, 1.0, 2.0, true);
  for (std::size_t t = 5 * std::size_t(p.HV); t < p.fg.size(); t += 6 * std::size_t(p.HV)) p.fg[t] = p.fg[t + 1] = -std::numeric_limits<double>::infinity();
  const auto want = reference(p, true);
  for (mform f : {mform::chunkwise, mform::parallel}) {
    CAPTURE(name(f));
    const auto got = run<double>(f, p, 256);
    CHECK(harness::rel_err(got.o, want.o) < 1e-13);
    CHECK(harness::rel_err(got.s, want.s) < 1e-13);
  }
}

TEST_CASE("mLSTM: results do not depend on the thread count, and two calls equal one", "[mlstm][threads][state]") {
  std::mt19937_64 rng(5);
  const auto p = make(rng, {}, 0.0, 2.0, 1.0, true);
  for (mform f : {mform::recurrent, mform::chunkwise, mform::parallel}) {
    const auto one = run<float>(f, p, 16, 1), two = run<float>(f, p, 16, 2), three = run<float>(f, p, 16, 3);
    CHECK(one.o == two.o);
    CHECK(one.o == three.o);
    CHECK(one.s == two.s);
  }
  // The first 23 tokens, then the rest from the state they leave (C = 16: a chunk boundary inside).
  auto head = p, tail = p;
  head.T = tail.T = 0;
  const index_t split = 23;
  const auto cut = [&](const std::vector<double>& x, index_t per, index_t t0, index_t t1) {
    std::vector<double> y;
    for (index_t b = 0; b < p.B; ++b)
      y.insert(y.end(), x.begin() + (b * p.T + t0) * per, x.begin() + (b * p.T + t1) * per);
    return y;
  };
  for (auto* part : {&head, &tail}) {
    const index_t t0 = part == &head ? 0 : split, t1 = part == &head ? split : p.T;
    part->T = t1 - t0;
    part->q = cut(p.q, p.H * p.K, t0, t1), part->k = cut(p.k, p.H * p.K, t0, t1);
    part->v = cut(p.v, p.HV * p.V, t0, t1), part->ig = cut(p.ig, p.HV, t0, t1), part->fg = cut(p.fg, p.HV, t0, t1);
  }
  const auto first = run<double>(mform::chunkwise, head, 16);
  // The state of the first part, stabilised again with m = 0 (its unstabilised form).
  tail.s0 = first.s;
  const auto second = run<double>(mform::chunkwise, tail, 16);
  const auto whole = run<double>(mform::chunkwise, p, 16);
  CHECK(harness::rel_err(second.o, cut(whole.o, p.HV * p.V, split, p.T)) < 1e-10);
  CHECK(harness::rel_err(second.s, whole.s) < 1e-10);
}

TEST_CASE("mLSTM: a state of the wrong shape is rejected, naming [N, HV, K, V + 2]", "[mlstm][validation]") {
  std::vector<float> q(2 * 5 * 1 * 4, 0.5f), v(2 * 5 * 1 * 3, 0.5f), g(2 * 5, 0.1f), out(v.size(), 7.0f);
  std::vector<float> s(2 * 1 * 4 * 3, 1.0f);  // [N, HV, K, V]: missing the two extra columns
  const la::mLSTM::inputs<float> in{.q = la::view<const float>(q.data(), 2, 5, 1, 4), .k = la::view<const float>(q.data(), 2, 5, 1, 4),
                                    .v = la::view<const float>(v.data(), 2, 5, 1, 3), .i = la::view<const float>(g.data(), 2, 5, 1),
                                    .f = la::view<const float>(g.data(), 2, 5, 1)};
  la::options<float> opt;
  opt.initial_state = la::view<const float>(s.data(), 2, 1, 4, 3);
  CHECK_THROWS_WITH(la::chunkwise_forward<la::mLSTM>(in, la::view(out.data(), 2, 5, 1, 3), opt),
                    Catch::Contains("options.initial_state") && Catch::Contains("V + 2"));
  CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 7.0f; }));
}
