// SPDX-License-Identifier: MIT
// RLS with forgetting (docs/math.md#rls), R12: recurrent (Sherman-Morrison) == batch ridge solve ==
// chunkwise (block Woodbury + Cholesky) == parallel (normal equations) == decode. The oracle
// below solves each prefix's weighted ridge problem directly in float64 (weights summed
// explicitly, Gaussian elimination), sharing nothing with the library's recursions.
#include "support/catch.hpp"
#include "support/harness.hpp"

using namespace harness;

namespace {

/// Inputs of an RLS problem in float64; s0 is empty or [N, HV, K, V + K] (S^T beside P).
struct rls_problem {
  ref::dims d;
  std::vector<double> q, k, v, g, s0;  // g empty = no forgetting
  double delta = 1.0;
  double scale = 1.0;
  std::vector<std::int64_t> cu;
  int sequences() const { return cu.empty() ? d.B : int(cu.size()) - 1; }
  int cols() const { return d.V + d.K; }
};

/// x = A^{-1} b for a small dense system (partial pivoting), A [n x n] row-major, b [n x m].
std::vector<double> solve(std::vector<double> A, std::vector<double> b, int n, int m) {
  for (int c = 0; c < n; ++c) {
    int piv = c;
    for (int r = c + 1; r < n; ++r)
      if (std::abs(A[r * n + c]) > std::abs(A[piv * n + c])) piv = r;
    for (int e = 0; e < n; ++e) std::swap(A[c * n + e], A[piv * n + e]);
    for (int e = 0; e < m; ++e) std::swap(b[c * m + e], b[piv * m + e]);
    for (int r = c + 1; r < n; ++r) {
      const double f = A[r * n + c] / A[c * n + c];
      for (int e = c; e < n; ++e) A[r * n + e] -= f * A[c * n + e];
      for (int e = 0; e < m; ++e) b[r * m + e] -= f * b[c * m + e];
    }
  }
  for (int r = n - 1; r >= 0; --r)
    for (int e = 0; e < m; ++e) {
      double acc = b[r * m + e];
      for (int c = r + 1; c < n; ++c) acc -= A[r * n + c] * b[c * m + e];
      b[r * m + e] = acc / A[r * n + r];
    }
  return b;
}

/// The oracle: for every prefix t of every sequence and head, with w_i = exp(sum_{j=i+1..t} g_j),
///   G = w_0 P0^{-1} + sum_i w_i k_i k_i^T,  C = w_0 P0^{-1} S0^T + sum_i w_i k_i v_i^T,
///   S_t^T = G^{-1} C,  o_t = S_t (scale q_t);  final state (S_T^T, G^{-1}).
ref::result oracle(const rls_problem& p) {
  const auto& d = p.d;
  const int K = d.K, V = d.V, W = p.cols();
  ref::result r;
  r.o.assign(std::size_t(d.B) * d.T * d.HV * V, 0.0);
  r.s.assign(std::size_t(p.sequences()) * d.HV * K * W, 0.0);
  auto qk = [&](const std::vector<double>& x, int b, int t, int h, int i) { return x[((std::size_t(b) * d.T + t) * d.H + h) * K + i]; };
  auto vv = [&](int b, int t, int hv, int j) { return p.v[((std::size_t(b) * d.T + t) * d.HV + hv) * V + j]; };
  auto gg = [&](int b, int t, int hv) { return p.g.empty() ? 0.0 : p.g[(std::size_t(b) * d.T + t) * d.HV + hv]; };
  for (int n = 0; n < p.sequences(); ++n) {
    const int b = p.cu.empty() ? n : 0, t0 = p.cu.empty() ? 0 : int(p.cu[n]), t1 = p.cu.empty() ? d.T : int(p.cu[n + 1]);
    for (int hv = 0; hv < d.HV; ++hv) {
      const int h = hv / (d.HV / d.H);
      std::vector<double> G0(std::size_t(K) * K), C0(std::size_t(K) * V);  // P0^{-1}, P0^{-1} S0^T
      if (p.s0.empty()) {
        for (int i = 0; i < K; ++i) G0[i * K + i] = p.delta;
      } else {
        std::vector<double> P0(std::size_t(K) * K), I(std::size_t(K) * K);
        for (int i = 0; i < K; ++i)
          for (int c = 0; c < K; ++c) P0[i * K + c] = p.s0[((std::size_t(n) * d.HV + hv) * K + i) * W + V + c], I[i * K + c] = i == c;
        G0 = solve(P0, I, K, K);
      }
      for (int i = 0; i < K; ++i)
        for (int j = 0; j < V; ++j)
          for (int c = 0; c < K; ++c)
            C0[i * V + j] += G0[i * K + c] * (p.s0.empty() ? 0.0 : p.s0[((std::size_t(n) * d.HV + hv) * K + c) * W + j]);
      std::vector<double> G, St, Ginv;
      for (int t = t0; t <= t1; ++t) {  // t = t1: the final state only
        const int last = std::min(t, t1 - 1);  // prefix [t0, last]
        if (t == t1 && t1 > t0 && false) break;
        auto weight = [&](int i) {  // prod_{j=i+1..last} gamma_j; i = t0 - 1 is the start
          double s = 0;
          for (int j = i + 1; j <= last; ++j) s += gg(b, j, hv);
          return std::exp(s);
        };
        const bool empty = t1 == t0;
        G.assign(std::size_t(K) * K, 0.0);
        std::vector<double> C(std::size_t(K) * V, 0.0);
        const double w0 = empty ? 1.0 : weight(t0 - 1);
        for (std::size_t e = 0; e < G.size(); ++e) G[e] = w0 * G0[e];
        for (std::size_t e = 0; e < C.size(); ++e) C[e] = w0 * C0[e];
        for (int i = t0; !empty && i <= last; ++i) {
          const double w = weight(i);
          for (int a = 0; a < K; ++a) {
            for (int c = 0; c < K; ++c) G[a * K + c] += w * qk(p.k, b, i, h, a) * qk(p.k, b, i, h, c);
            for (int j = 0; j < V; ++j) C[a * V + j] += w * qk(p.k, b, i, h, a) * vv(b, i, hv, j);
          }
        }
        St = solve(G, C, K, V);  // S^T [K, V]
        if (t == t1) break;
        for (int j = 0; j < V; ++j) {
          double o = 0;
          for (int i = 0; i < K; ++i) o += St[i * V + j] * p.scale * qk(p.q, b, t, h, i);
          r.o[((std::size_t(b) * d.T + t) * d.HV + hv) * V + j] = o;
        }
      }
      std::vector<double> I(std::size_t(K) * K);
      for (int i = 0; i < K; ++i) I[i * K + i] = 1;
      Ginv = solve(G, I, K, K);
      for (int i = 0; i < K; ++i) {
        for (int j = 0; j < V; ++j) r.s[((std::size_t(n) * d.HV + hv) * K + i) * W + j] = St[i * V + j];
        for (int c = 0; c < K; ++c) r.s[((std::size_t(n) * d.HV + hv) * K + i) * W + V + c] = Ginv[i * K + c];
      }
    }
  }
  return r;
}

/// Random problem: keys of norm ~1, log forgetting factors log(sigmoid(N(0,1) + shift)) (shift 4:
/// gamma ~ 0.98), and a random valid start state (S0 random, P0 = (M M^T / K + I/2)^{-1}) when with_s0.
rls_problem make_rls(std::mt19937_64& rng, ref::dims d, bool forget, bool with_s0, std::vector<std::int64_t> cu = {},
                     double shift = 4.0) {
  std::normal_distribution<double> normal;
  rls_problem p;
  p.d = d;
  p.cu = std::move(cu);
  p.scale = 1.0 / std::sqrt(double(d.K));
  auto fill = [&](std::vector<double>& x, std::size_t n, double s) {
    x.resize(n);
    for (auto& e : x) e = s * normal(rng);
  };
  fill(p.q, std::size_t(d.B) * d.T * d.H * d.K, 1.0);
  fill(p.k, p.q.size(), 1.0 / std::sqrt(double(d.K)));
  fill(p.v, std::size_t(d.B) * d.T * d.HV * d.V, 1.0);
  if (forget) {
    p.g.resize(std::size_t(d.B) * d.T * d.HV);
    for (auto& e : p.g) e = logsigmoid(normal(rng) + shift);
  }
  if (with_s0) {
    const int K = d.K, W = p.cols();
    p.s0.assign(std::size_t(p.sequences()) * d.HV * K * W, 0.0);
    for (int n = 0; n < p.sequences() * d.HV; ++n) {
      std::vector<double> M(std::size_t(K) * K), G(std::size_t(K) * K), I(std::size_t(K) * K);
      for (auto& e : M) e = normal(rng);
      for (int i = 0; i < K; ++i)
        for (int c = 0; c < K; ++c) {
          for (int e = 0; e < K; ++e) G[i * K + c] += M[i * K + e] * M[c * K + e] / K;
          G[i * K + c] += 0.5 * (i == c);
          I[i * K + c] = i == c;
        }
      const auto P = solve(G, I, K, K);
      for (int i = 0; i < K; ++i) {
        for (int j = 0; j < d.V; ++j) p.s0[(std::size_t(n) * K + i) * W + j] = normal(rng);
        for (int c = 0; c < K; ++c) p.s0[(std::size_t(n) * K + i) * W + d.V + c] = 0.5 * (P[i * K + c] + P[c * K + i]);
      }
    }
  }
  return p;
}

/// Runs one form of the library (NaN-poisoned buffers in the given layout).
template <class T>
outcome run_rls(form f, const rls_problem& p, index_t chunk = 16, layout lay = layout::contiguous, int threads = 0) {
  using A = la::state_t<T>;
  const auto& d = p.d;
  const index_t N = p.sequences(), W = p.cols();
  buffer<T, 4> q({d.B, d.T, d.H, d.K}, lay, p.q), k({d.B, d.T, d.H, d.K}, lay, p.k);
  buffer<T, 4> v({d.B, d.T, d.HV, d.V}, lay, p.v), out({d.B, d.T, d.HV, d.V}, lay);
  buffer<T, 3> g({d.B, d.T, d.HV}, lay);
  if (!p.g.empty()) g.set(p.g);
  buffer<A, 4> s0({N, d.HV, d.K, W}, lay), s1({N, d.HV, d.K, W}, lay);
  if (!p.s0.empty()) s0.set(p.s0);
  la::options<A> opt;
  opt.chunk_size = chunk;
  opt.threads = threads;
  std::vector<std::int64_t> cu = p.cu;
  if (!cu.empty()) opt.cu_seqlens = la::view(cu.data(), cu.size());
  la::RLS::inputs<T> in{.q = q.view(), .k = k.view(), .v = v.view(), .delta = p.delta};
  if (!p.g.empty()) in.g = g.view();
  if (f == form::decode) {
    if (!p.s0.empty()) s1.set(p.s0);
    else la::RLS::init_state(s1.view(), p.delta);  // decode needs an explicit start: S = 0, P = I / delta
    auto slice = [](const auto& view, index_t t0) {
      auto e = view.extents();
      e[1] = 1;
      return std::remove_cvref_t<decltype(view)>(view.data() + t0 * view.stride(1), e, view.strides());
    };
    for (index_t t = 0; t < d.T; ++t) {
      auto it = in;
      it.q = slice(in.q, t), it.k = slice(in.k, t), it.v = slice(in.v, t);
      if (!p.g.empty()) it.g = slice(in.g, t);
      la::decode_step<la::RLS>(it, slice(out.view(), t), s1.view(), opt);
    }
  } else {
    if (!p.s0.empty()) opt.initial_state = s0.view();
    opt.final_state = s1.view();
    if (f == form::recurrent) la::recurrent_forward<la::RLS>(in, out.view(), opt);
    if (f == form::parallel) la::parallel_forward<la::RLS>(in, out.view(), opt);
    if (f == form::chunkwise) la::chunkwise_forward<la::RLS>(in, out.view(), opt);
  }
  outcome res;
  res.r.o = out.get();
  res.r.s = s1.get();
  res.padding_ok = out.padding_untouched() && s1.padding_untouched();
  return res;
}

bool symmetric_p(const rls_problem& p, const std::vector<double>& s) {
  const int K = p.d.K, V = p.d.V, W = p.cols();
  for (int n = 0; n < p.sequences() * p.d.HV; ++n)
    for (int i = 0; i < K; ++i)
      for (int c = 0; c < K; ++c)
        if (s[(std::size_t(n) * K + i) * W + V + c] != s[(std::size_t(n) * K + c) * W + V + i]) return false;
  return true;
}

template <class T>
constexpr double rls_tol() {
  return std::is_same_v<T, double> ? 1e-7 : 1e-4;  // R12: 1e-7 in fp64
}

}  // namespace

TEMPLATE_TEST_CASE("R12: RLS recurrent == batch ridge solve == chunkwise == parallel == decode", "[rls]", float, double) {
  std::mt19937_64 rng(711);
  for (bool forget : {false, true}) {
    for (bool with_s0 : {false, true}) {
      auto p = make_rls(rng, {.B = 2, .T = 37, .H = 2, .HV = 4, .K = 6, .V = 5}, forget, with_s0);
      const auto want = oracle(p);
      for (form f : all_forms) {
        for (index_t C : {1, 4, 16, 64}) {
          if (f != form::chunkwise && C != 16) continue;
          for (layout lay : {layout::contiguous, layout::strided}) {
            if (f == form::decode && !with_s0) continue;  // covered by the explicit start state below
            CAPTURE(forget, with_s0, name(f), C, int(lay));
            const auto got = run_rls<TestType>(f, p, C, lay);
            CHECK(rel_err(got.r.o, want.o) < rls_tol<TestType>());
            CHECK(rel_err(got.r.s, want.s) < rls_tol<TestType>());
            CHECK(symmetric_p(p, got.r.s));
            CHECK(got.padding_ok);
          }
        }
      }
      if (!with_s0) {  // decode from the explicit default start (S = 0, P = I / delta)
        const auto got = run_rls<TestType>(form::decode, p);
        CHECK(rel_err(got.r.o, want.o) < rls_tol<TestType>());
      }
    }
  }
}

TEMPLATE_TEST_CASE("R12: chunks that forget by far more than a factor 16 are as accurate as the recurrence", "[rls]", float,
                   double) {
  // gamma ~ sigmoid(N(0,1) + 2) (mean 0.84): a chunk of 64 forgets a factor ~1e-5, which a
  // single Woodbury block over it would lose to cancellation in float (docs/math.md#rls).
  std::mt19937_64 rng(714);
  auto p = make_rls(rng, {.B = 1, .T = 203, .H = 1, .HV = 2, .K = 8, .V = 5}, true, true, {}, 2.0);
  const auto want = oracle(p);
  for (index_t C : {16, 64, 128}) {
    CAPTURE(C);
    const auto got = run_rls<TestType>(form::chunkwise, p, C);
    CHECK(rel_err(got.r.o, want.o) < rls_tol<TestType>());
    CHECK(rel_err(got.r.s, want.s) < rls_tol<TestType>());
  }
}

TEST_CASE("R12: unweighted RLS with a small ridge fits the pairs (S_T k_i ~ v_i for T <= K)", "[rls]") {
  std::mt19937_64 rng(712);
  auto p = make_rls(rng, {.B = 1, .T = 5, .H = 1, .HV = 1, .K = 8, .V = 3}, false, false);
  p.delta = 1e-9;
  for (form f : {form::recurrent, form::chunkwise, form::parallel}) {
    CAPTURE(name(f));
    const auto got = run_rls<double>(f, p, 4);
    const int W = p.cols();
    std::vector<double> sk, v;
    for (int t = 0; t < p.d.T; ++t)
      for (int j = 0; j < p.d.V; ++j) {
        double acc = 0;
        for (int i = 0; i < p.d.K; ++i) acc += got.r.s[i * W + j] * p.k[t * p.d.K + i];
        sk.push_back(acc);
        v.push_back(p.v[t * p.d.V + j]);
      }
    CHECK(rel_err(sk, v) < 1e-6);
  }
}

TEMPLATE_TEST_CASE("RLS: packed variable-length batch and state carry", "[rls]", float, double) {
  std::mt19937_64 rng(713);
  auto p = make_rls(rng, {.B = 1, .T = 45, .H = 1, .HV = 3, .K = 5, .V = 4}, true, true, {0, 0, 1, 20, 45});
  const auto want = oracle(p);
  for (form f : {form::recurrent, form::chunkwise, form::parallel}) {
    CAPTURE(name(f));
    const auto got = run_rls<TestType>(f, p, 8, layout::contiguous, 2);
    CHECK(rel_err(got.r.o, want.o) < rls_tol<TestType>());
    CHECK(rel_err(got.r.s, want.s) < rls_tol<TestType>());
  }
  // Carry: [0, h) then [h, T) from the returned (S, P), h not aligned to the chunk.
  auto whole = make_rls(rng, {.B = 2, .T = 30, .H = 1, .HV = 2, .K = 4, .V = 3}, true, false);
  const auto ref_all = oracle(whole);
  const int h = 13;
  auto first = whole, second = whole;
  auto cut = [&](std::vector<double>& x, int per, int a, int e) {
    std::vector<double> y;
    for (int b = 0; b < whole.d.B; ++b)
      y.insert(y.end(), x.begin() + (std::size_t(b) * whole.d.T + a) * per, x.begin() + (std::size_t(b) * whole.d.T + e) * per);
    x = y;
  };
  for (auto [part, a, e] : {std::tuple{&first, 0, h}, std::tuple{&second, h, 30}}) {
    part->d.T = e - a;
    cut(part->q, whole.d.H * whole.d.K, a, e);
    cut(part->k, whole.d.H * whole.d.K, a, e);
    cut(part->v, whole.d.HV * whole.d.V, a, e);
    cut(part->g, whole.d.HV, a, e);
  }
  for (form f : {form::recurrent, form::chunkwise, form::parallel}) {
    CAPTURE(name(f));
    const auto r1 = run_rls<TestType>(f, first, 8);
    second.s0 = r1.r.s;
    const auto r2 = run_rls<TestType>(f, second, 8);
    CHECK(rel_err(r2.r.s, ref_all.s) < rls_tol<TestType>());
    const int w = whole.d.HV * whole.d.V;
    std::vector<double> o;
    for (int b = 0; b < 2; ++b) {
      o.insert(o.end(), r1.r.o.begin() + b * h * w, r1.r.o.begin() + (b + 1) * h * w);
      o.insert(o.end(), r2.r.o.begin() + b * (30 - h) * w, r2.r.o.begin() + (b + 1) * (30 - h) * w);
    }
    CHECK(rel_err(o, ref_all.o) < rls_tol<TestType>());
  }
}

TEST_CASE("RLS: bad state shape and ridge are rejected by name before anything is written", "[rls]") {
  std::vector<float> x(2 * 3 * 4, 0.5f), o(2 * 3 * 4, std::nanf("")), s(2 * 4 * 4, std::nanf(""));
  la::RLS::inputs<float> in{.q = la::view(x.data(), 1, 3, 2, 4), .k = la::view(x.data(), 1, 3, 2, 4),
                            .v = la::view(x.data(), 1, 3, 2, 4)};
  auto message = [&](auto&& call) {
    try {
      call();
    } catch (const la::error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  la::options<float> opt;
  opt.final_state = la::view(s.data(), 1, 2, 4, 4);  // needs [1, 2, 4, 8]
  const auto m1 = message([&] { la::chunkwise_forward<la::RLS>(in, la::view(o.data(), 1, 3, 2, 4), opt); });
  CHECK(m1.find("options.final_state") != std::string::npos);
  CHECK(m1.find("V + K") != std::string::npos);
  in.delta = -1.0;
  const auto m2 = message([&] { la::recurrent_forward<la::RLS>(in, la::view(o.data(), 1, 3, 2, 4)); });
  CHECK(m2.find("'delta'") != std::string::npos);
  for (float e : o) CHECK(std::isnan(e));
  for (float e : s) CHECK(std::isnan(e));
}
