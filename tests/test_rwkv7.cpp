// SPDX-License-Identifier: MIT
// RWKV-7 (docs/math.md#rwkv-7): every form against a float64 reference written here from the
// recurrence S_t = S_{t-1} (diag(exp(g_t)) + a_t b_t^T) + v_t k_t^T, o_t = S_t (scale q_t), with
// S [V, K] as in the paper: odd T, K != V, grouped value heads, packed batches with one-token
// sequences, carried state, hard gates (0, -60, -1e4), contracting (RWKV-7's a = -kappa^,
// b = kappa^ ⊙ alpha) and arbitrary a, b; the reduction to KDA, thread independence, state
// carry and the argument checks.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/harness.hpp"

namespace {
namespace la = linattn;
using la::index_t;

struct rproblem {
  index_t B = 2, T = 37, H = 2, HV = 4, K = 8, V = 6;
  std::vector<std::int64_t> cu;           // packed batch offsets (then B == 1)
  std::vector<double> q, k, v, g, a, b;   // [B, T, H, K] q, k; [B, T, HV, V] v; [B, T, HV, K] g, a, b
  std::vector<double> s0;                 // [N, HV, K, V] or empty
  index_t N() const { return cu.empty() ? B : index_t(cu.size()) - 1; }
};

/// How a and b are drawn: RWKV-7's contracting pair, or free vectors of moderate size.
enum class low_rank { rwkv7, free };
/// How the log decays are drawn: moderate, or mixed with exact 0, -60 and -1e4.
enum class decays { mild, hard };

rproblem make(std::mt19937_64& rng, rproblem p, low_rank lr, decays dk, bool with_s0) {
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> unit(0.05, 0.95);
  auto fill = [&](std::vector<double>& x, index_t n) {
    x.resize(std::size_t(n));
    for (auto& e : x) e = normal(rng);
  };
  const index_t nk = p.B * p.T * p.HV * p.K;
  fill(p.q, p.B * p.T * p.H * p.K);
  fill(p.k, p.B * p.T * p.H * p.K);
  fill(p.v, p.B * p.T * p.HV * p.V);
  fill(p.g, nk);
  for (auto& e : p.g) e = -std::exp(0.7 * e - 1.5);  // about -0.2, in (-2, -0.01) mostly
  if (dk == decays::hard) {
    std::uniform_int_distribution<int> pick(0, 4);
    for (auto& e : p.g) {
      const int c = pick(rng);
      e = c == 0 ? 0.0 : c == 1 ? -60.0 : c == 2 ? -1e4 : e;
    }
  }
  fill(p.a, nk);
  fill(p.b, nk);
  for (index_t r = 0; r < p.B * p.T * p.HV; ++r) {
    double* a = &p.a[std::size_t(r * p.K)];
    double* b = &p.b[std::size_t(r * p.K)];
    if (lr == low_rank::rwkv7) {  // a = -kappa^, b = kappa^ ⊙ alpha, |kappa^| = 1, alpha in (0, 1)
      double n2 = 0;
      for (index_t d = 0; d < p.K; ++d) n2 += a[d] * a[d];
      for (index_t d = 0; d < p.K; ++d) {
        const double kh = a[d] / std::sqrt(n2);
        a[d] = -kh;
        b[d] = kh * unit(rng);
      }
    } else {
      for (index_t d = 0; d < p.K; ++d) a[d] *= 0.8 / std::sqrt(double(p.K)), b[d] *= 0.8 / std::sqrt(double(p.K));
    }
  }
  if (with_s0) fill(p.s0, p.N() * p.HV * p.K * p.V);
  return p;
}

struct rresult {
  std::vector<double> o, s;  // [B, T, HV, V], [N, HV, K, V] (S^T)
};

/// The RWKV-7 recurrence per (sequence, value head) in float64, S [V, K].
rresult reference(const rproblem& p, double scale) {
  rresult r;
  r.o.assign(std::size_t(p.B * p.T * p.HV * p.V), 0.0);
  r.s.assign(std::size_t(p.N() * p.HV * p.K * p.V), 0.0);
  const std::size_t K = std::size_t(p.K), V = std::size_t(p.V);
  for (index_t s = 0; s < p.N(); ++s)
    for (index_t hv = 0; hv < p.HV; ++hv) {
      const index_t bb = p.cu.empty() ? s : 0, t0 = p.cu.empty() ? 0 : p.cu[std::size_t(s)];
      const index_t t1 = p.cu.empty() ? p.T : p.cu[std::size_t(s) + 1], h = hv / (p.HV / p.H);
      std::vector<double> S(V * K, 0.0), sa(V);
      const std::size_t st = std::size_t(s * p.HV + hv) * K * V;
      if (!p.s0.empty())
        for (std::size_t i = 0; i < V; ++i)
          for (std::size_t j = 0; j < K; ++j) S[i * K + j] = p.s0[st + j * V + i];
      for (index_t t = t0; t < t1; ++t) {
        const std::size_t qk = std::size_t((bb * p.T + t) * p.H + h) * K;
        const std::size_t gk = std::size_t((bb * p.T + t) * p.HV + hv) * K;
        const std::size_t vo = std::size_t((bb * p.T + t) * p.HV + hv) * V;
        for (std::size_t i = 0; i < V; ++i) {
          sa[i] = 0;
          for (std::size_t j = 0; j < K; ++j) sa[i] += S[i * K + j] * p.a[gk + j];
        }
        for (std::size_t i = 0; i < V; ++i) {
          double o = 0;
          for (std::size_t j = 0; j < K; ++j) {
            double& e = S[i * K + j];
            e = e * std::exp(p.g[gk + j]) + sa[i] * p.b[gk + j] + p.v[vo + i] * p.k[qk + j];
            o += e * scale * p.q[qk + j];
          }
          r.o[vo + i] = o;
        }
      }
      for (std::size_t i = 0; i < V; ++i)
        for (std::size_t j = 0; j < K; ++j) r.s[st + j * V + i] = S[i * K + j];
    }
  return r;
}

using rform = harness::form;
using harness::name;

template <class T>
la::tensor_view<const T, 4> tok(const std::vector<T>& x, const rproblem& p, index_t t0, index_t len, index_t heads, index_t D) {
  return la::tensor_view<const T, 4>(x.data() + t0 * heads * D, {p.B, len, heads, D}, {p.T * heads * D, heads * D, D, 1});
}

/// Runs one form with scalar type T (options::scale left unset when scale < 0) over tokens
/// [t0, p.T) of p, from p.s0; outputs of earlier tokens stay -5. With `slots`, the states live
/// in a pool of N + 2 slots (options::state_indices, in place; the unused slots hold 0.5 and
/// must keep it).
template <class T>
rresult run(rform f, const rproblem& p, index_t chunk = 16, int threads = 0, double scale = -1, index_t t0 = 0,
            const std::vector<std::int32_t>* slots = nullptr) {
  using A = la::state_t<T>;
  auto cast = [](const std::vector<double>& x) { return std::vector<T>(x.begin(), x.end()); };
  const auto q = cast(p.q), k = cast(p.k), v = cast(p.v), g = cast(p.g), a = cast(p.a), b = cast(p.b);
  const index_t per = p.HV * p.K * p.V, P = slots ? p.N() + 2 : p.N();
  std::vector<A> s0(p.s0.begin(), p.s0.end()), s1(std::size_t(P * per), A(slots ? 0.5 : -5));
  std::vector<T> out(p.v.size(), T(-5));
  la::options<A> opt;
  opt.chunk_size = chunk;
  opt.threads = threads;
  if (scale >= 0) opt.scale = scale;
  if (!p.s0.empty()) opt.initial_state = la::view<const A>(s0.data(), p.N(), p.HV, p.K, p.V);
  opt.final_state = la::view(s1.data(), p.N(), p.HV, p.K, p.V);
  if (!p.cu.empty()) opt.cu_seqlens = la::view(p.cu.data(), index_t(p.cu.size()));
  if (slots) {  // sequence n in slot slots[n], read and written in place
    REQUIRE(!s0.empty());
    for (index_t n = 0; n < p.N(); ++n)
      std::copy_n(s0.begin() + n * per, per, s1.begin() + (*slots)[std::size_t(n)] * per);
    opt.initial_state = la::view<const A>(s1.data(), P, p.HV, p.K, p.V);
    opt.final_state = la::view(s1.data(), P, p.HV, p.K, p.V);
    opt.state_indices = la::view(slots->data(), index_t(slots->size()));
  }
  const auto in_at = [&](index_t t0, index_t len) {
    return la::RWKV7::inputs<T>{.q = tok(q, p, t0, len, p.H, p.K), .k = tok(k, p, t0, len, p.H, p.K),
                                .v = tok(v, p, t0, len, p.HV, p.V), .g = tok(g, p, t0, len, p.HV, p.K),
                                .a = tok(a, p, t0, len, p.HV, p.K), .b = tok(b, p, t0, len, p.HV, p.K)};
  };
  const auto o_at = [&](index_t t0, index_t len) {
    return la::tensor_view<T, 4>(out.data() + t0 * p.HV * p.V, {p.B, len, p.HV, p.V}, {p.T * p.HV * p.V, p.HV * p.V, p.V, 1});
  };
  if (f == rform::decode && !slots) {  // decode runs on the final-state buffer, from the initial state
    REQUIRE(p.cu.empty());
    if (!p.s0.empty()) std::copy(s0.begin(), s0.end(), s1.begin());
    else std::fill(s1.begin(), s1.end(), A(0));
  }
  const auto in_from = [&](index_t t, index_t len) { return in_at(t0 + t, len); };
  const auto o_from = [&](index_t t, index_t len) { return o_at(t0 + t, len); };
  harness::run_slices<la::RWKV7>(f, p.T - t0, in_from, o_from, la::view(s1.data(), P, p.HV, p.K, p.V), opt);
  rresult r{std::vector<double>(out.begin(), out.end()), std::vector<double>(s1.begin(), s1.end())};
  if (slots) {  // the sequences' slots in sequence order; the others untouched
    std::vector<double> s(std::size_t(p.N() * per));
    for (index_t n = 0; n < p.N(); ++n)
      std::copy_n(r.s.begin() + (*slots)[std::size_t(n)] * per, per, s.begin() + n * per);
    for (index_t n = 0; n < p.N(); ++n) std::fill_n(r.s.begin() + (*slots)[std::size_t(n)] * per, per, 0.5);
    CHECK(std::all_of(r.s.begin(), r.s.end(), [](double x) { return x == 0.5; }));
    r.s = s;
  }
  return r;
}

template <class T>
double tol() {
  return std::is_same_v<T, double> ? 1e-10 : 2e-4;
}

bool all_finite(const std::vector<double>& x) {
  return std::all_of(x.begin(), x.end(), [](double e) { return std::isfinite(e); });
}

/// Every form of `forms` at every chunk size of `chunks` matches `want` (outputs, final state),
/// finite throughout.
template <class T>
void expect_forms(const rproblem& p, const rresult& want, std::initializer_list<rform> forms,
                  std::initializer_list<index_t> chunks, double scale = -1) {
  for (rform f : forms)
    for (index_t C : chunks) {
      CAPTURE(name(f), C);
      const auto got = run<T>(f, p, C, 0, scale);
      CHECK(all_finite(got.o));
      CHECK(all_finite(got.s));
      CHECK(harness::rel_err(got.o, want.o) < tol<T>());
      CHECK(harness::rel_err(got.s, want.s) < tol<T>());
    }
}
constexpr auto every_form = {rform::recurrent, rform::chunkwise, rform::parallel, rform::decode};
}  // namespace

TEST_CASE("RWKV-7 reference: a zero low-rank part is the vector-decay rule, a decay of 1 keeps the state", "[rwkv7]") {
  std::mt19937_64 rng(11);
  rproblem shape;
  shape.B = 1, shape.T = 3, shape.H = shape.HV = 1;
  auto p = make(rng, shape, low_rank::free, decays::mild, true);
  std::fill(p.a.begin(), p.a.end(), 0.0);
  // With a = 0: S_T = S_0 prod diag(w_t) + sum_t v_t k_t^T prod_{u > t} diag(w_u), by hand.
  const auto r = reference(p, 1.0);
  for (index_t i = 0; i < p.V; ++i)
    for (index_t j = 0; j < p.K; ++j) {
      double s = p.s0[std::size_t(j * p.V + i)];
      for (index_t t = 0; t < p.T; ++t)
        s = s * std::exp(p.g[std::size_t(t * p.K + j)]) + p.v[std::size_t(t * p.V + i)] * p.k[std::size_t(t * p.K + j)];
      CHECK(std::abs(r.s[std::size_t(j * p.V + i)] - s) < 1e-12 * (1 + std::abs(s)));
    }
}

TEMPLATE_TEST_CASE("RWKV-7: every form matches the float64 reference (odd T, K != V, grouped heads, carried state)",
                   "[rwkv7]", float, double) {
  std::mt19937_64 rng(2);
  for (low_rank lr : {low_rank::rwkv7, low_rank::free})
    for (bool s0 : {true, false}) {
      const auto p = make(rng, {}, lr, decays::mild, s0);
      CAPTURE(s0, lr == low_rank::rwkv7);
      expect_forms<TestType>(p, reference(p, 1.0), every_form, {1, 16, 64});  // RWKV-7's default scale is 1
    }
}

TEMPLATE_TEST_CASE("RWKV-7: spans of several 64-row tiles (long chunks, the parallel form), an explicit scale",
                   "[rwkv7]", float, double) {
  std::mt19937_64 rng(3);
  rproblem shape;
  shape.B = 1, shape.T = 203, shape.H = 1, shape.HV = 2, shape.K = 24, shape.V = 20;
  for (low_rank lr : {low_rank::rwkv7, low_rank::free}) {
    const auto p = make(rng, shape, lr, decays::mild, true);
    CAPTURE(lr == low_rank::rwkv7);
    expect_forms<TestType>(p, reference(p, 0.37), every_form, {48, 100, 160}, 0.37);
  }
}

TEMPLATE_TEST_CASE("RWKV-7: a packed batch (one-token and empty sequences) with initial states", "[rwkv7][varlen]", float,
                   double) {
  std::mt19937_64 rng(4);
  rproblem shape;
  shape.B = 1, shape.T = 151, shape.cu = {0, 1, 1, 70, 71, 151};
  const auto p = make(rng, shape, low_rank::rwkv7, decays::mild, true);
  expect_forms<TestType>(p, reference(p, 1.0), {rform::recurrent, rform::chunkwise, rform::parallel}, {16, 32});
}

TEMPLATE_TEST_CASE("RWKV-7: log decays of exactly 0, -60 and -1e4 stay finite and match float64", "[rwkv7][robustness]",
                   float, double) {
  std::mt19937_64 rng(5);
  for (low_rank lr : {low_rank::rwkv7, low_rank::free}) {
    rproblem shape;
    shape.T = 77;
    const auto p = make(rng, shape, lr, decays::hard, true);
    CAPTURE(lr == low_rank::rwkv7);
    expect_forms<TestType>(p, reference(p, 1.0), every_form, {16, 64});
  }
}

TEMPLATE_TEST_CASE("RWKV-7 with a = -beta (exp(g) ⊙ k), b = k and values beta v is KDA", "[rwkv7][reductions]", float,
                   double) {
  // KDA: S_t = S_{t-1} diag(w)(I - beta k k^T) + beta v k^T = S_{t-1}(diag(w) - beta (w ⊙ k) k^T) + (beta v) k^T.
  using T = TestType;
  using A = la::state_t<T>;
  std::mt19937_64 rng(6);
  rproblem shape;
  shape.T = 45;
  auto p = make(rng, shape, low_rank::free, decays::mild, true);
  std::uniform_real_distribution<double> u01(0.1, 1.0);
  std::vector<double> beta(std::size_t(p.B * p.T * p.HV)), kda_v = p.v;
  for (auto& e : beta) e = u01(rng);
  for (index_t t = 0; t < p.B * p.T; ++t)
    for (index_t hv = 0; hv < p.HV; ++hv) {
      const std::size_t tv = std::size_t(t * p.HV + hv), h = std::size_t(hv / (p.HV / p.H));
      for (index_t d = 0; d < p.K; ++d) {
        const double kd = p.k[(std::size_t(t * p.H) + h) * std::size_t(p.K) + std::size_t(d)];
        p.a[tv * std::size_t(p.K) + std::size_t(d)] = -beta[tv] * std::exp(p.g[tv * std::size_t(p.K) + std::size_t(d)]) * kd;
        p.b[tv * std::size_t(p.K) + std::size_t(d)] = kd;
      }
      for (index_t j = 0; j < p.V; ++j) p.v[tv * std::size_t(p.V) + std::size_t(j)] *= beta[tv];
    }
  const double scale = 1.0 / std::sqrt(double(p.K));  // KDA's default
  const auto want = reference(p, scale);
  // KDA in the library, on the original values.
  auto cast = [](const std::vector<double>& x) { return std::vector<T>(x.begin(), x.end()); };
  const auto q = cast(p.q), k = cast(p.k), v = cast(kda_v), g = cast(p.g), bt = cast(beta);
  std::vector<A> s0(p.s0.begin(), p.s0.end()), s1(p.s0.size());
  std::vector<T> out(p.v.size());
  const la::KDA::inputs<T> in{.q = tok(q, p, 0, p.T, p.H, p.K), .k = tok(k, p, 0, p.T, p.H, p.K),
                              .v = tok(v, p, 0, p.T, p.HV, p.V), .g = tok(g, p, 0, p.T, p.HV, p.K),
                              .beta = la::view<const T>(bt.data(), p.B, p.T, p.HV)};
  la::options<A> opt;
  opt.chunk_size = 16;
  opt.initial_state = la::view<const A>(s0.data(), p.N(), p.HV, p.K, p.V);
  opt.final_state = la::view(s1.data(), p.N(), p.HV, p.K, p.V);
  la::chunkwise_forward<la::KDA>(in, la::view(out.data(), p.B, p.T, p.HV, p.V), opt);
  const std::vector<double> kda_o(out.begin(), out.end()), kda_s(s1.begin(), s1.end());
  CHECK(harness::rel_err(kda_o, want.o) < tol<T>());
  CHECK(harness::rel_err(kda_s, want.s) < tol<T>());
  expect_forms<T>(p, {kda_o, kda_s}, every_form, {16}, scale);
}

TEMPLATE_TEST_CASE("RWKV-7: a state pool (options.state_indices), in place, in every form", "[rwkv7][pool]", float,
                   double) {
  std::mt19937_64 rng(9);
  rproblem shape;
  shape.B = 3, shape.T = 19;
  const auto p = make(rng, shape, low_rank::rwkv7, decays::mild, true);
  const auto want = reference(p, 1.0);
  const std::vector<std::int32_t> slots{4, 0, 2};
  for (rform f : every_form) {
    CAPTURE(name(f));
    const auto got = run<TestType>(f, p, 8, 0, -1, 0, &slots);
    CHECK(harness::rel_err(got.o, want.o) < tol<TestType>());
    CHECK(harness::rel_err(got.s, want.s) < tol<TestType>());
  }
}

TEST_CASE("RWKV-7: results do not depend on the thread count, and two calls equal one", "[rwkv7][threads][state]") {
  std::mt19937_64 rng(7);
  rproblem one_head;
  one_head.B = 1, one_head.H = one_head.HV = 1, one_head.T = 150;  // chunks of one sequence spread over threads
  for (const rproblem& shape : {rproblem{}, one_head}) {
    const auto p = make(rng, shape, low_rank::rwkv7, decays::mild, true);
    for (rform f : {rform::recurrent, rform::chunkwise, rform::parallel}) {
      CAPTURE(name(f), shape.B);
      const auto one = run<float>(f, p, 16, 1), two = run<float>(f, p, 16, 2);
      CHECK(one.o == two.o);
      CHECK(one.s == two.s);
    }
  }
  // The first 23 tokens, then the rest from the state they leave (C = 16: a chunk boundary inside).
  const auto p = make(rng, {}, low_rank::free, decays::mild, true);
  const index_t split = 23;
  auto head = p, tail = p;
  head.T = split;  // the first 23 tokens of each batch row: p's rows, cut short
  for (auto* x : {&head.q, &head.k, &head.v, &head.g, &head.a, &head.b}) {
    const std::size_t per = x->size() / std::size_t(p.B * p.T);
    std::vector<double> y;
    for (index_t b = 0; b < p.B; ++b)
      y.insert(y.end(), x->begin() + std::ptrdiff_t(std::size_t(b * p.T) * per),
               x->begin() + std::ptrdiff_t(std::size_t(b * p.T + split) * per));
    *x = y;
  }
  tail.s0 = run<double>(rform::chunkwise, head, 16).s;
  const auto second = run<double>(rform::chunkwise, tail, 16, 0, -1, split);  // tokens [23, T)
  auto whole = run<double>(rform::chunkwise, p, 16);
  for (index_t b = 0; b < p.B; ++b)  // the rows the second call does not write
    std::fill_n(whole.o.begin() + std::ptrdiff_t(b * p.T * p.HV * p.V), split * p.HV * p.V, -5.0);
  CHECK(harness::rel_err(second.o, whole.o) < 1e-10);
  CHECK(harness::rel_err(second.s, whole.s) < 1e-10);
}

TEST_CASE("RWKV-7 validation names the argument and writes nothing", "[rwkv7][validation]") {
  std::mt19937_64 rng(8);
  rproblem shape;
  shape.B = 2, shape.T = 5, shape.H = 1, shape.HV = 2, shape.K = 4, shape.V = 3;
  const auto p = make(rng, shape, low_rank::rwkv7, decays::mild, false);
  auto cast = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  const auto q = cast(p.q), k = cast(p.k), v = cast(p.v), g = cast(p.g), a = cast(p.a), b = cast(p.b);
  std::vector<float> out(p.v.size(), std::numeric_limits<float>::quiet_NaN());
  const auto o = la::view(out.data(), p.B, p.T, p.HV, p.V);
  const la::RWKV7::inputs<float> good{.q = tok(q, p, 0, p.T, p.H, p.K), .k = tok(k, p, 0, p.T, p.H, p.K),
                                      .v = tok(v, p, 0, p.T, p.HV, p.V), .g = tok(g, p, 0, p.T, p.HV, p.K),
                                      .a = tok(a, p, 0, p.T, p.HV, p.K), .b = tok(b, p, 0, p.T, p.HV, p.K)};
  auto expect_error = [&](la::RWKV7::inputs<float> in, const std::string& what, bool finite = false) {
    CAPTURE(what);
    la::options<float> opt;
    opt.check_finite = finite;
    try {
      la::chunkwise_forward<la::RWKV7>(in, o, opt);
      FAIL("no error");
    } catch (const la::error& e) {
      CHECK(std::string(e.what()).find(what) != std::string::npos);
    }
    CHECK(std::all_of(out.begin(), out.end(), [](float x) { return std::isnan(x); }));
  };
  auto in = good;
  in.a = {};
  expect_error(in, "'a' is missing");
  in = good;
  in.b = la::view<const float>(b.data(), p.B, p.T, p.HV, p.K - 1);
  expect_error(in, "'b' has shape [2, 5, 2, 3], expected [B, T, HV, K] = [2, 5, 2, 4]");
  in = good;
  in.g = la::view<const float>(g.data(), p.B, p.T, 1, p.K);
  expect_error(in, "'g' has shape [2, 5, 1, 4], expected [B, T, HV, K]");
  auto bad = g;
  bad[6] = 0.25f;  // a log decay above 0
  in = good;
  in.g = tok(bad, p, 0, p.T, p.HV, p.K);
  expect_error(in, "'g'", true);
  auto nan_a = a;
  nan_a[3] = std::numeric_limits<float>::quiet_NaN();
  in = good;
  in.a = tok(nan_a, p, 0, p.T, p.HV, p.K);
  expect_error(in, "'a'", true);
  // The good inputs run (the checks above are not failing for another reason).
  la::chunkwise_forward<la::RWKV7>(good, o, la::options<float>{});
  CHECK(std::none_of(out.begin(), out.end(), [](float x) { return std::isnan(x); }));
}
