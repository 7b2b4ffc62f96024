// SPDX-License-Identifier: MIT
// The nonparametric rules (docs/math.md#softmax-attention, docs/math.md#local-linear-attention)
// and R13 (docs/math.md#equivalences): softmax attention's online (tiled) and
// token-by-token forms and decode over a kv_cache == a direct float64 softmax written here;
// LocalLinearAttention == the weighted least-squares fit on [1, k_i - q] with an unpenalised
// intercept, solved here by Gaussian elimination; and its large-ridge limit is softmax.
#include "support/catch.hpp"
#include "support/harness.hpp"

using namespace harness;

namespace {

/// Random q, k, v (std normal times `amp` for q and k) in ref::problem's layout.
ref::problem make_np(std::mt19937_64& rng, ref::dims d, double amp, std::vector<std::int64_t> cu = {}) {
  auto p = make_problem(rng, d, ref::decay::none, gates::mild, false, std::move(cu));
  for (auto& e : p.q) e *= amp;
  for (auto& e : p.k) e *= amp;
  return p;
}

/// For every query: w_i = softmax_i(scale q_t . k_i) over the sequence's i <= t; returns
/// f(weights, first token, t) per (sequence, value head, t) as out [B, T, HV, V].
template <class F>
std::vector<double> per_query(const ref::problem& p, F&& f) {
  const auto& d = p.d;
  std::vector<double> out(std::size_t(d.B) * d.T * d.HV * d.V, 0.0);
  for (int n = 0; n < p.sequences(); ++n) {
    const int b = p.cu.empty() ? n : 0, t0 = p.cu.empty() ? 0 : int(p.cu[n]), t1 = p.cu.empty() ? d.T : int(p.cu[n + 1]);
    for (int hv = 0; hv < d.HV; ++hv) {
      const int h = hv / (d.HV / d.H);
      for (int t = t0; t < t1; ++t) {
        std::vector<double> s;
        double mx = -1e300, sum = 0;
        for (int i = t0; i <= t; ++i) {
          double dot = 0;
          for (int c = 0; c < d.K; ++c) dot += p.scale * p.q[p.qk_at(b, t, h, c)] * p.k[p.qk_at(b, i, h, c)];
          s.push_back(dot);
          mx = std::max(mx, dot);
        }
        for (auto& e : s) sum += e = std::exp(e - mx);
        for (auto& e : s) e /= sum;
        const auto o = f(s, b, t0, t, h, hv);
        for (int j = 0; j < d.V; ++j) out[p.v_at(b, t, hv, j)] = o[j];
      }
    }
  }
  return out;
}

std::vector<double> softmax_oracle(const ref::problem& p) {
  return per_query(p, [&](const std::vector<double>& w, int b, int t0, int t, int, int hv) {
    std::vector<double> o(std::size_t(p.d.V), 0.0);
    for (int i = t0; i <= t; ++i)
      for (int j = 0; j < p.d.V; ++j) o[j] += w[i - t0] * p.v[p.v_at(b, i, hv, j)];
    return o;
  });
}

/// Weighted least squares on X_i = [1, k_i - q_t] with penalty ridge on the slope only; the
/// prediction at q_t is the intercept.
std::vector<double> local_linear_oracle(const ref::problem& p, double ridge) {
  const int K = p.d.K, V = p.d.V, n = K + 1;
  return per_query(p, [&](const std::vector<double>& w, int b, int t0, int t, int h, int hv) {
    std::vector<double> A(std::size_t(n) * n, 0.0), R(std::size_t(n) * V, 0.0);
    for (int i = t0; i <= t; ++i) {
      std::vector<double> x(n, 1.0);
      for (int c = 0; c < K; ++c) x[c + 1] = p.k[p.qk_at(b, i, h, c)] - p.q[p.qk_at(b, t, h, c)];
      for (int a = 0; a < n; ++a) {
        for (int c = 0; c < n; ++c) A[a * n + c] += w[i - t0] * x[a] * x[c];
        for (int j = 0; j < V; ++j) R[a * V + j] += w[i - t0] * x[a] * p.v[p.v_at(b, i, hv, j)];
      }
    }
    for (int a = 1; a < n; ++a) A[a * n + a] += ridge;
    for (int c = 0; c < n; ++c)  // Gaussian elimination (A is SPD)
      for (int a = c + 1; a < n; ++a) {
        const double f = A[a * n + c] / A[c * n + c];
        for (int e = c; e < n; ++e) A[a * n + e] -= f * A[c * n + e];
        for (int j = 0; j < V; ++j) R[a * V + j] -= f * R[c * V + j];
      }
    std::vector<double> beta(std::size_t(n) * V);
    for (int a = n - 1; a >= 0; --a)
      for (int j = 0; j < V; ++j) {
        double acc = R[a * V + j];
        for (int e = a + 1; e < n; ++e) acc -= A[a * n + e] * beta[e * V + j];
        beta[a * V + j] = acc / A[a * n + a];
      }
    return std::vector<double>(beta.begin(), beta.begin() + V);
  });
}

template <class Rule, class T>
std::vector<double> run_np(form f, const ref::problem& p, index_t chunk = 16, layout lay = layout::contiguous,
                           double ridge = 1e-3) {
  const auto& d = p.d;
  buffer<T, 4> q({d.B, d.T, d.H, d.K}, lay, p.q), k({d.B, d.T, d.H, d.K}, lay, p.k);
  buffer<T, 4> v({d.B, d.T, d.HV, d.V}, lay, p.v), out({d.B, d.T, d.HV, d.V}, lay);
  la::options<la::state_t<T>> opt;
  opt.chunk_size = chunk;
  std::vector<std::int64_t> cu = p.cu;
  if (!cu.empty()) opt.cu_seqlens = la::view(cu.data(), cu.size());
  typename Rule::template inputs<T> in{.q = q.view(), .k = k.view(), .v = v.view()};
  if constexpr (std::is_same_v<Rule, la::LocalLinearAttention>) in.ridge = ridge;
  if (f == form::decode) {
    if constexpr (std::is_same_v<Rule, la::SoftmaxAttention>) {
      la::kv_cache<la::state_t<T>> cache(d.B, d.H, d.HV, d.K, d.V);
      auto slice = [](const auto& view, index_t t0) {
        auto e = view.extents();
        e[1] = 1;
        return std::remove_cvref_t<decltype(view)>(view.data() + t0 * view.stride(1), e, view.strides());
      };
      for (index_t t = 0; t < d.T; ++t) {
        typename Rule::template inputs<T> it{.q = slice(in.q, t), .k = slice(in.k, t), .v = slice(in.v, t)};
        la::decode_step<Rule>(it, slice(out.view(), t), cache, opt);
      }
      CHECK(cache.length(0) == d.T);
      CHECK(cache.bytes() == std::size_t(d.B) * d.T * (d.H * d.K + d.HV * d.V) * sizeof(la::state_t<T>));
    }
  }
  if (f == form::parallel) la::parallel_forward<Rule>(in, out.view(), opt);
  if constexpr (std::is_same_v<Rule, la::SoftmaxAttention>) {  // p = 1 attention has the parallel form only
    if (f == form::recurrent) la::recurrent_forward<Rule>(in, out.view(), opt);
    if (f == form::chunkwise) la::chunkwise_forward<Rule>(in, out.view(), opt);
  }
  CHECK(out.padding_untouched());
  return out.get();
}

}  // namespace

TEMPLATE_TEST_CASE("R13: softmax online (tiled) == token by token == decode == direct softmax", "[softmax]", float,
                   double) {
  std::mt19937_64 rng(721);
  for (double amp : {1.0, 30.0}) {  // amp 30: scores of several hundred (the running max matters)
    const auto p = make_np(rng, {.B = 2, .T = 53, .H = 2, .HV = 6, .K = 7, .V = 5}, amp);
    const auto want = softmax_oracle(p);
    for (form f : all_forms) {
      for (index_t C : {1, 5, 16, 64}) {
        if (f != form::chunkwise && C != 16) continue;
        for (layout lay : {layout::contiguous, layout::strided}) {
          CAPTURE(amp, name(f), C, int(lay));
          const auto got = run_np<la::SoftmaxAttention, TestType>(f, p, C, lay);
          CHECK(rel_err(got, want) < tolerance<TestType>());
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("R13: softmax over a packed variable-length batch", "[softmax]", float, double) {
  std::mt19937_64 rng(722);
  const auto p = make_np(rng, {.B = 1, .T = 70, .H = 1, .HV = 2, .K = 4, .V = 3}, 2.0, {0, 0, 1, 33, 70});
  const auto want = softmax_oracle(p);
  for (form f : {form::recurrent, form::parallel, form::chunkwise}) {
    CAPTURE(name(f));
    CHECK(rel_err(run_np<la::SoftmaxAttention, TestType>(f, p, 8), want) < tolerance<TestType>());
  }
}

TEMPLATE_TEST_CASE("R13: p = 1 closed form == weighted least squares with unpenalised intercept", "[local_linear]",
                   float, double) {
  std::mt19937_64 rng(723);
  const auto p = make_np(rng, {.B = 2, .T = 29, .H = 1, .HV = 2, .K = 5, .V = 3}, 1.0);
  for (double ridge : {1e-3, 0.5}) {
    for (layout lay : {layout::contiguous, layout::strided}) {
      CAPTURE(ridge, int(lay));
      const auto want = local_linear_oracle(p, ridge);
      const auto got = run_np<la::LocalLinearAttention, TestType>(form::parallel, p, 16, lay, ridge);
      // fp32: Skk's condition number (~1/ridge while t <= K) costs digits; 1e-3 relative.
      CHECK(rel_err(got, want) < (std::is_same_v<TestType, double> ? 1e-9 : 1e-3));
    }
  }
  auto packed = make_np(rng, {.B = 1, .T = 30, .H = 1, .HV = 1, .K = 3, .V = 2}, 1.0, {0, 0, 1, 12, 30});
  CHECK(rel_err(run_np<la::LocalLinearAttention, TestType>(form::parallel, packed, 16, layout::contiguous, 0.1),
                local_linear_oracle(packed, 0.1)) < (std::is_same_v<TestType, double> ? 1e-9 : 1e-3));
}

TEST_CASE("p = 1 attention with a huge ridge is softmax attention (the slope vanishes)", "[local_linear]") {
  std::mt19937_64 rng(724);
  const auto p = make_np(rng, {.B = 1, .T = 25, .H = 1, .HV = 3, .K = 4, .V = 5}, 1.0);
  const auto ll = run_np<la::LocalLinearAttention, double>(form::parallel, p, 16, layout::contiguous, 1e12);
  const auto sm = run_np<la::SoftmaxAttention, double>(form::parallel, p);
  CHECK(rel_err(ll, sm) < 1e-9);
  const auto ll_small = run_np<la::LocalLinearAttention, double>(form::parallel, p, 16, layout::contiguous, 1e-3);
  CHECK(rel_err(ll_small, sm) > 1e-2);  // the correction is really there
}

TEST_CASE("nonparametric rules reject state options, bad ridges and mismatched caches by name", "[softmax]") {
  std::vector<float> x(3 * 4, 0.5f), o(3 * 4, std::nanf("")), s(4 * 4, 0.0f);
  auto message = [&](auto&& call) {
    try {
      call();
    } catch (const la::error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  la::SoftmaxAttention::inputs<float> in{.q = la::view(x.data(), 1, 3, 1, 4), .k = la::view(x.data(), 1, 3, 1, 4),
                                         .v = la::view(x.data(), 1, 3, 1, 4)};
  la::options<float> opt;
  opt.initial_state = la::view(s.data(), 1, 1, 4, 4);
  CHECK(message([&] { la::chunkwise_forward<la::SoftmaxAttention>(in, la::view(o.data(), 1, 3, 1, 4), opt); })
            .find("options.initial_state") != std::string::npos);
  la::LocalLinearAttention::inputs<float> ll{.q = in.q, .k = in.k, .v = in.v, .ridge = 0.0};
  CHECK(message([&] { la::parallel_forward<la::LocalLinearAttention>(ll, la::view(o.data(), 1, 3, 1, 4)); })
            .find("'ridge'") != std::string::npos);
  la::kv_cache<float> cache(1, 1, 1, 5, 4);
  CHECK(message([&] { la::decode_step<la::SoftmaxAttention>(in, la::view(o.data(), 1, 3, 1, 4), cache); })
            .find("'cache'") != std::string::npos);
  CHECK(cache.length(0) == 0);
  for (float e : o) CHECK(std::isnan(e));
}
