// SPDX-License-Identifier: MIT
// DeltaProduct and GatedDeltaProduct (docs/math.md#deltaproduct): every form against a float64
// token loop written from the definition, on odd shapes (T not a multiple of C, K != V, grouped
// value heads), strided views, packed batches, carried states and strong gates; the reductions
// R8 (n_h = 1 is Delta / GatedDelta; n_h = 2 is the delta rule on the interleaved sequence);
// validation.
#include <Eigen/Core>

#include "support/cases.hpp"
#include "support/catch.hpp"

using namespace harness;

namespace {

/// A product problem in float64: q [B, T, H, K], k [B, T, n, H, K], v [B, T, n, HV, V],
/// beta [B, T, n, HV], g [B, T, HV] (gated only), s0 [N, HV, K, V] (= S^T), cu offsets.
struct product_problem {
  ref::dims d;
  int n = 1;  // n_h
  bool gated = false;
  double scale = 1.0;
  std::vector<double> q, k, v, beta, g, s0;
  std::vector<std::int64_t> cu;

  int sequences() const { return cu.empty() ? d.B : int(cu.size()) - 1; }
  std::size_t k_at(int b, int t, int j, int h, int i) const { return (((std::size_t(b) * d.T + t) * n + j) * d.H + h) * d.K + i; }
  std::size_t v_at(int b, int t, int j, int hv, int c) const { return (((std::size_t(b) * d.T + t) * n + j) * d.HV + hv) * d.V + c; }
  std::size_t beta_at(int b, int t, int j, int hv) const { return ((std::size_t(b) * d.T + t) * n + j) * d.HV + hv; }
};

/// The definition, token by token, S in [V, K] (S[c * K + i] = S_{c,i}):
///   S <- exp(g_t) S;  for j: S <- S + beta_tj (v_tj - S k_tj) k_tj^T;  o_t = S (scale q_t).
ref::result reference(const product_problem& p) {
  const auto& d = p.d;
  const int N = p.sequences();
  ref::result r;
  r.o.assign(std::size_t(d.B) * d.T * d.HV * d.V, 0.0);
  r.s.assign(std::size_t(N) * d.HV * d.K * d.V, 0.0);
  std::vector<double> S(std::size_t(d.V) * d.K);
  for (int seq = 0; seq < N; ++seq) {
    const int b = p.cu.empty() ? seq : 0, t0 = p.cu.empty() ? 0 : int(p.cu[seq]), t1 = p.cu.empty() ? d.T : int(p.cu[seq + 1]);
    for (int hv = 0; hv < d.HV; ++hv) {
      const int h = hv / (d.HV / d.H);
      const auto s_at = [&](int i, int c) { return ((std::size_t(seq) * d.HV + hv) * d.K + i) * d.V + c; };
      for (int c = 0; c < d.V; ++c)
        for (int i = 0; i < d.K; ++i) S[c * d.K + i] = p.s0.empty() ? 0.0 : p.s0[s_at(i, c)];
      for (int t = t0; t < t1; ++t) {
        const double decay = p.gated ? std::exp(p.g[(std::size_t(b) * d.T + t) * d.HV + hv]) : 1.0;
        for (auto& e : S) e *= decay;
        for (int j = 0; j < p.n; ++j) {
          const double beta = p.beta[p.beta_at(b, t, j, hv)];
          for (int c = 0; c < d.V; ++c) {
            double sk = 0;
            for (int i = 0; i < d.K; ++i) sk += S[c * d.K + i] * p.k[p.k_at(b, t, j, h, i)];
            const double w = beta * (p.v[p.v_at(b, t, j, hv, c)] - sk);
            for (int i = 0; i < d.K; ++i) S[c * d.K + i] += w * p.k[p.k_at(b, t, j, h, i)];
          }
        }
        for (int c = 0; c < d.V; ++c) {
          double o = 0;
          for (int i = 0; i < d.K; ++i) o += S[c * d.K + i] * p.scale * p.q[((std::size_t(b) * d.T + t) * d.H + h) * d.K + i];
          r.o[((std::size_t(b) * d.T + t) * d.HV + hv) * d.V + c] = o;
        }
      }
      for (int c = 0; c < d.V; ++c)
        for (int i = 0; i < d.K; ++i) r.s[s_at(i, c)] = S[c * d.K + i];
    }
  }
  return r;
}

/// Random problem: normal q, v; unit keys (per sub-step); beta = sigmoid(N(0,1)); log gates
/// per `gm`; a random non-zero S0.
product_problem make(std::mt19937_64& rng, ref::dims d, int n, bool gated, gates gm = gates::mild,
                     std::vector<std::int64_t> cu = {}) {
  std::normal_distribution<double> normal;
  product_problem p;
  p.d = d, p.n = n, p.gated = gated, p.cu = std::move(cu);
  p.scale = 1.0 / std::sqrt(double(d.K));
  auto fill = [&](std::vector<double>& x, std::size_t size) {
    x.resize(size);
    for (auto& e : x) e = normal(rng);
  };
  fill(p.q, std::size_t(d.B) * d.T * d.H * d.K);
  fill(p.k, std::size_t(d.B) * d.T * n * d.H * d.K);
  fill(p.v, std::size_t(d.B) * d.T * n * d.HV * d.V);
  fill(p.s0, std::size_t(p.sequences()) * d.HV * d.K * d.V);
  for (std::size_t r = 0; r < p.k.size(); r += std::size_t(d.K)) {
    double n2 = 0;
    for (int i = 0; i < d.K; ++i) n2 += p.k[r + i] * p.k[r + i];
    for (int i = 0; i < d.K; ++i) p.k[r + i] /= std::sqrt(n2);
  }
  p.beta.resize(std::size_t(d.B) * d.T * n * d.HV);
  for (auto& e : p.beta) e = 1.0 / (1.0 + std::exp(-normal(rng)));
  if (gated) {
    p.g.resize(std::size_t(d.B) * d.T * d.HV);
    for (auto& e : p.g) e = gm == gates::strong ? -60.0 : gm == gates::weak ? -1e-6 : logsigmoid(normal(rng) + 2.0);
  }
  return p;
}

struct call {
  index_t chunk = 64;
  int threads = 0;
  layout lay = layout::contiguous;
  const std::vector<std::int32_t>* slots = nullptr;  // options.state_indices: sequence n in slot slots[n]
};

/// Runs one form of Rule (DeltaProduct or GatedDeltaProduct) on p; decode runs T single-token
/// steps.
template <class Rule, class T>
outcome run_product(form f, const product_problem& p, const call& c = {}) {
  using A = la::state_t<T>;
  const auto& d = p.d;
  const index_t N = p.sequences();
  buffer<T, 4> q({d.B, d.T, d.H, d.K}, c.lay, p.q), beta({d.B, d.T, p.n, d.HV}, c.lay, p.beta);
  buffer<T, 5> k({d.B, d.T, p.n, d.H, d.K}, c.lay, p.k), v({d.B, d.T, p.n, d.HV, d.V}, c.lay, p.v);
  buffer<T, 3> g({d.B, d.T, d.HV}, c.lay);
  if (p.gated) g.set(p.g);
  buffer<T, 4> out({d.B, d.T, d.HV, d.V}, c.lay);
  const index_t P = c.slots ? N + 2 : N;  // a pool of N + 2 slots, or one state per sequence
  buffer<A, 4> s0({P, d.HV, d.K, d.V}, c.lay), s1({P, d.HV, d.K, d.V}, c.lay);
  std::vector<double> pool(std::size_t(P) * d.HV * d.K * d.V, 0.5);  // the slots no sequence uses
  const std::size_t per_seq = std::size_t(d.HV) * d.K * d.V;
  for (index_t n = 0; n < N; ++n) {
    const index_t slot = c.slots ? (*c.slots)[std::size_t(n)] : n;
    std::copy(p.s0.begin() + n * per_seq, p.s0.begin() + (n + 1) * per_seq, pool.begin() + slot * per_seq);
  }
  s0.set(pool);
  auto inputs = [&](index_t t0, index_t len) {
    auto cut = [&](const auto& view) {
      auto e = view.extents();
      e[1] = len;
      return std::remove_cvref_t<decltype(view)>(view.data() + t0 * view.stride(1), e, view.strides());
    };
    typename Rule::template inputs<T> in;
    in.q = cut(q.view()), in.k = cut(k.view()), in.v = cut(v.view()), in.beta = cut(beta.view());
    if constexpr (Rule::decay == la::decay_kind::scalar) in.g = cut(g.view());
    return std::pair(in, cut(out.view()));
  };
  la::options<A> opt;
  opt.chunk_size = c.chunk;
  opt.threads = c.threads;
  std::vector<std::int64_t> cu = p.cu;
  if (!cu.empty()) opt.cu_seqlens = la::view(cu.data(), cu.size());
  if (c.slots) opt.state_indices = la::view(c.slots->data(), c.slots->size());
  if (f == form::decode) {
    s1.set(pool);
    for (index_t t = 0; t < d.T; ++t) {
      const auto [in, o] = inputs(t, 1);
      la::decode_step<Rule>(in, o, s1.view(), opt);
    }
  } else {
    const auto [in, o] = inputs(0, d.T);
    opt.initial_state = s0.view();
    opt.final_state = s1.view();
    if (f == form::recurrent) la::recurrent_forward<Rule>(in, o, opt);
    if (f == form::parallel) la::parallel_forward<Rule>(in, o, opt);
    if (f == form::chunkwise) la::chunkwise_forward<Rule>(in, o, opt);
  }
  outcome res;
  res.r.o = out.get();
  const std::vector<double> states = s1.get();
  for (index_t n = 0; n < N; ++n) {  // the final states in sequence order
    const index_t slot = c.slots ? (*c.slots)[std::size_t(n)] : n;
    res.r.s.insert(res.r.s.end(), states.begin() + slot * per_seq, states.begin() + (slot + 1) * per_seq);
  }
  res.padding_ok = out.padding_untouched() && s1.padding_untouched();
  return res;
}

/// Tokens [t0, t1) of p (B > 1 rows kept) starting from state s0.
product_problem slice(const product_problem& p, int t0, int t1, std::vector<double> s0) {
  product_problem s = p;
  s.d.T = t1 - t0;
  s.s0 = std::move(s0);
  auto cut = [&](const std::vector<double>& x, std::size_t per_token) {
    std::vector<double> y;
    for (int b = 0; b < p.d.B; ++b)
      y.insert(y.end(), x.begin() + (std::size_t(b) * p.d.T + t0) * per_token, x.begin() + (std::size_t(b) * p.d.T + t1) * per_token);
    return y;
  };
  const auto& d = p.d;
  s.q = cut(p.q, std::size_t(d.H) * d.K);
  s.k = cut(p.k, std::size_t(p.n) * d.H * d.K);
  s.v = cut(p.v, std::size_t(p.n) * d.HV * d.V);
  s.beta = cut(p.beta, std::size_t(p.n) * d.HV);
  if (p.gated) s.g = cut(p.g, std::size_t(d.HV));
  return s;
}

const std::vector<ref::dims> odd_shapes = {
    {.B = 2, .T = 37, .H = 2, .HV = 4, .K = 8, .V = 6},
    {.B = 1, .T = 51, .H = 3, .HV = 3, .K = 5, .V = 7},
};

template <class Rule>
constexpr bool gated_rule = Rule::decay == la::decay_kind::scalar;

using product_cases = std::tuple<rule_case<la::DeltaProduct, float>, rule_case<la::DeltaProduct, double>,
                                 rule_case<la::GatedDeltaProduct, float>, rule_case<la::GatedDeltaProduct, double>>;

}  // namespace

TEMPLATE_LIST_TEST_CASE("DeltaProduct: every form matches the token loop for n_h = 1, 2, 3", "[delta_product][forms]",
                        product_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(81);
  for (const auto& d : odd_shapes)
    for (int n : {1, 2, 3}) {
      const auto p = make(rng, d, n, gated_rule<Rule>);
      const auto want = reference(p);
      for (form f : {form::recurrent, form::parallel, form::decode}) {
        CAPTURE(name(f), n, d.T, d.HV, d.K, d.V);
        expect_matches<T>(run_product<Rule, T>(f, p), want);
      }
      for (index_t C : {1, 2, 3, 5, 8, 16, 17, 64, 256}) {  // sub-steps: chunks end inside tokens too
        CAPTURE(C, n, d.T, d.HV, d.K, d.V);
        expect_matches<T>(run_product<Rule, T>(form::chunkwise, p, {.chunk = C}), want);
      }
    }
}

TEMPLATE_LIST_TEST_CASE("DeltaProduct: strided head-first views, threads and production sizes", "[delta_product][forms]",
                        product_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(82);
  const auto p = make(rng, odd_shapes[0], 2, gated_rule<Rule>);
  const auto want = reference(p);
  for (form f : all_forms) {
    CAPTURE(name(f));
    expect_matches<T>(run_product<Rule, T>(f, p, {.chunk = 16, .lay = layout::strided}), want);
    const auto one = run_product<Rule, T>(f, p, {.chunk = 16, .threads = 1});
    const auto three = run_product<Rule, T>(f, p, {.chunk = 16, .threads = 3});
    CHECK(one.r.o == three.r.o);
    CHECK(one.r.s == three.r.s);
  }
  const auto big = make(rng, {.B = 1, .T = 150, .H = 1, .HV = 2, .K = 64, .V = 128}, 3, gated_rule<Rule>);
  const auto big_want = reference(big);
  for (index_t C : {16, 64, 128}) {
    CAPTURE(C);
    expect_matches<T>(run_product<Rule, T>(form::chunkwise, big, {.chunk = C}), big_want);
    expect_matches<T>(run_product<Rule, T>(form::chunkwise, big, {.chunk = C, .threads = 1}), big_want);
  }
}

TEMPLATE_LIST_TEST_CASE("DeltaProduct: state carry, two calls equal one", "[delta_product][state]", product_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(83);
  const auto p = make(rng, odd_shapes[0], 3, gated_rule<Rule>);
  const auto want = reference(p);
  for (form f : all_forms)
    for (int h : {8, 13}) {  // 16 and 26 sub-steps: a chunk boundary (C = 8) and none
      CAPTURE(name(f), h);
      check_state_carry<T>(want, p.d, p.s0, h, [&](int t0, int t1, const std::vector<double>& s0) {
        return run_product<Rule, T>(f, slice(p, t0, t1, s0), {.chunk = 8});
      });
    }
}

TEMPLATE_LIST_TEST_CASE("DeltaProduct: packed variable-length batches", "[delta_product][varlen]", product_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(84);
  const std::vector<std::int64_t> cu{0, 5, 5, 22, 40, 41, 81};  // empty, one-token and multi-chunk sequences
  const auto p = make(rng, {.B = 1, .T = 81, .H = 2, .HV = 4, .K = 6, .V = 5}, 2, gated_rule<Rule>, gates::mild, cu);
  const auto want = reference(p);
  for (form f : {form::recurrent, form::parallel, form::chunkwise}) {
    CAPTURE(name(f));
    expect_matches<T>(run_product<Rule, T>(f, p, {.chunk = 8}), want);
  }
}

TEMPLATE_LIST_TEST_CASE("DeltaProduct: a state pool (options.state_indices) in every form", "[delta_product][pool]",
                        product_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(89);
  const auto p = make(rng, {.B = 3, .T = 19, .H = 1, .HV = 2, .K = 6, .V = 5}, 2, gated_rule<Rule>);
  const auto want = reference(p);
  const std::vector<std::int32_t> slots{4, 0, 2};
  for (form f : all_forms) {
    CAPTURE(name(f));
    expect_matches<T>(run_product<Rule, T>(f, p, {.chunk = 8, .slots = &slots}), want);
  }
}

TEMPLATE_TEST_CASE("DeltaProduct: bf16 and half inputs match float64 on the rounded inputs", "[delta_product][half]",
                   Eigen::bfloat16, Eigen::half) {
  using X = TestType;
  std::mt19937_64 rng(90);
  auto p = make(rng, {.B = 2, .T = 29, .H = 2, .HV = 4, .K = 16, .V = 12}, 3, true);
  for (auto* v : {&p.q, &p.k, &p.v, &p.g, &p.beta})
    for (double& e : *v) e = static_cast<double>(static_cast<X>(e));
  for (double& e : p.s0) e = static_cast<double>(static_cast<float>(e));  // the state is float
  const auto want = reference(p);
  const double out_tol = std::is_same_v<X, Eigen::bfloat16> ? 1e-2 : 2e-3;  // outputs rounded once
  for (form f : all_forms) {
    CAPTURE(name(f));
    const auto got = run_product<la::GatedDeltaProduct, X>(f, p, {.chunk = 16});
    CHECK(rel_err(got.r.o, want.o) < out_tol);
    CHECK(rel_err(got.r.s, want.s) < 1e-4);
  }
}

TEST_CASE("GatedDeltaProduct: strong and weak gates in every form", "[delta_product][gates]") {
  std::mt19937_64 rng(85);
  for (gates gm : {gates::strong, gates::weak}) {
    const auto p = make(rng, odd_shapes[0], 2, true, gm);
    const auto want = reference(p);
    for (form f : all_forms) {
      CAPTURE(name(f), int(gm));
      expect_matches<float>(run_product<la::GatedDeltaProduct, float>(f, p, {.chunk = 16}), want);
      expect_matches<double>(run_product<la::GatedDeltaProduct, double>(f, p, {.chunk = 16}), want);
    }
  }
}

namespace {
/// The same inputs as a Delta / GatedDelta problem on the interleaved sequence of T n sub-steps
/// (docs/math.md#deltaproduct): q only at the last sub-step of a token, the gate only at the first.
ref::problem interleaved(const product_problem& p) {
  const auto& d = p.d;
  ref::problem r;
  r.d = d;
  r.d.T = d.T * p.n;
  r.kind = p.gated ? ref::decay::scalar : ref::decay::none;
  r.rule = ref::update::delta;
  r.scale = p.scale;
  r.s0 = p.s0;
  r.k = p.k, r.v = p.v, r.beta = p.beta;  // [B, T, n, ...] is [B, T n, ...]
  r.q.assign(r.k.size(), 0.0);
  r.g.assign(p.gated ? std::size_t(d.B) * r.d.T * d.HV : 0, 0.0);
  for (int b = 0; b < d.B; ++b)
    for (int t = 0; t < d.T; ++t) {
      for (int x = 0; x < d.H * d.K; ++x)
        r.q[((std::size_t(b) * r.d.T + t * p.n + p.n - 1) * d.H) * d.K + x] = p.q[(std::size_t(b) * d.T + t) * d.H * d.K + x];
      if (p.gated)
        for (int hv = 0; hv < d.HV; ++hv)
          r.g[(std::size_t(b) * r.d.T + t * p.n) * d.HV + hv] = p.g[(std::size_t(b) * d.T + t) * d.HV + hv];
    }
  return r;
}
/// Rows n - 1, 2n - 1, ... of an interleaved [B, T n, HV, V] output.
std::vector<double> last_substeps(const std::vector<double>& o, const product_problem& p) {
  std::vector<double> y;
  const std::size_t w = std::size_t(p.d.HV) * p.d.V;
  for (int b = 0; b < p.d.B; ++b)
    for (int t = 0; t < p.d.T; ++t) {
      const auto row = o.begin() + (std::size_t(b) * p.d.T * p.n + std::size_t(t) * p.n + p.n - 1) * w;
      y.insert(y.end(), row, row + w);
    }
  return y;
}
}  // namespace

TEMPLATE_TEST_CASE("R8: DeltaProduct with n_h = 1 is Delta / GatedDelta", "[delta_product][reductions]", float, double) {
  using T = TestType;
  std::mt19937_64 rng(86);
  for (bool gated : {false, true}) {
    const auto p = make(rng, odd_shapes[0], 1, gated);
    const ref::problem one = interleaved(p);  // with n = 1: the same tokens
    for (form f : all_forms) {
      CAPTURE(name(f), gated);
      const auto product = gated ? run_product<la::GatedDeltaProduct, T>(f, p, {.chunk = 16})
                                 : run_product<la::DeltaProduct, T>(f, p, {.chunk = 16});
      const auto delta = gated ? run<la::GatedDelta, T>(f, one, {.chunk = 16}) : run<la::Delta, T>(f, one, {.chunk = 16});
      CHECK(rel_err(product.r.o, delta.r.o) < tolerance<T>());
      CHECK(rel_err(product.r.s, delta.r.s) < tolerance<T>());
    }
  }
}

TEMPLATE_TEST_CASE("R8: DeltaProduct with n_h = 2 is the delta rule on the interleaved sequence", "[delta_product][reductions]",
                   float, double) {
  using T = TestType;
  std::mt19937_64 rng(87);
  for (bool gated : {false, true}) {
    const auto p = make(rng, odd_shapes[0], 2, gated);
    const ref::problem sub = interleaved(p);
    for (form f : all_forms) {
      CAPTURE(name(f), gated);
      const auto product = gated ? run_product<la::GatedDeltaProduct, T>(f, p, {.chunk = 16})
                                 : run_product<la::DeltaProduct, T>(f, p, {.chunk = 16});
      const auto delta = gated ? run<la::GatedDelta, T>(f, sub, {.chunk = 16}) : run<la::Delta, T>(f, sub, {.chunk = 16});
      CHECK(rel_err(product.r.o, last_substeps(delta.r.o, p)) < tolerance<T>());
      CHECK(rel_err(product.r.s, delta.r.s) < tolerance<T>());
      // ... and the float64 delta-rule oracle on the interleaved sequence.
      CHECK(rel_err(product.r.o, last_substeps(ref::run(sub).o, p)) < tolerance<T>());
    }
  }
}

TEST_CASE("DeltaProduct validation names the argument and writes nothing", "[delta_product][validation]") {
  std::mt19937_64 rng(88);
  const ref::dims d{.B = 2, .T = 5, .H = 1, .HV = 2, .K = 4, .V = 3};
  const auto p = make(rng, d, 2, true);
  std::vector<float> q(p.q.begin(), p.q.end()), k(p.k.begin(), p.k.end()), v(p.v.begin(), p.v.end());
  std::vector<float> beta(p.beta.begin(), p.beta.end()), g(p.g.begin(), p.g.end());
  std::vector<float> out(std::size_t(d.B) * d.T * d.HV * d.V, std::numeric_limits<float>::quiet_NaN());
  const auto o = la::view(out.data(), d.B, d.T, d.HV, d.V);
  la::GatedDeltaProduct::inputs<float> good{.q = la::view<const float>(q.data(), d.B, d.T, d.H, d.K),
                                            .k = la::view<const float>(k.data(), d.B, d.T, 2, d.H, d.K),
                                            .v = la::view<const float>(v.data(), d.B, d.T, 2, d.HV, d.V),
                                            .g = la::view<const float>(g.data(), d.B, d.T, d.HV),
                                            .beta = la::view<const float>(beta.data(), d.B, d.T, 2, d.HV)};
  auto expect_error = [&](la::GatedDeltaProduct::inputs<float> in, const std::string& what, la::options<float> opt = {}) {
    CAPTURE(what);
    try {
      la::chunkwise_forward<la::GatedDeltaProduct>(in, o, opt);
      FAIL("no error");
    } catch (const la::error& e) {
      CHECK(std::string(e.what()).find(what) != std::string::npos);
    }
    CHECK(std::all_of(out.begin(), out.end(), [](float x) { return std::isnan(x); }));
  };
  auto in = good;
  in.k = la::view<const float>(k.data(), d.B, d.T, 0, d.H, d.K);
  expect_error(in, "'k' has shape [2, 5, 0, 1, 4], expected [B, T, n_h, H, K] with n_h >= 1");
  in = good;
  in.k = la::view<const float>(k.data(), d.B, d.T, 2, d.H, d.K - 1);
  expect_error(in, "'k' has shape [2, 5, 2, 1, 3], expected [B, T, n_h, H, K]");
  in = good;
  in.v = la::view<const float>(v.data(), d.B, d.T, 1, d.HV, d.V);
  expect_error(in, "'v' has shape [2, 5, 1, 2, 3], expected [B, T, n_h, HV, V] = [2, 5, 2, HV, V]");
  in = good;
  in.beta = la::view<const float>(beta.data(), d.B, d.T, 1, d.HV);
  expect_error(in, "'beta' has shape [2, 5, 1, 2], expected [B, T, n_h, HV] = [2, 5, 2, 2]");
  in = good;
  in.g = {};
  expect_error(in, "'g' is missing");
  std::vector<float> bad_beta = beta;
  bad_beta[7] = -0.5f;
  in = good;
  in.beta = la::view<const float>(bad_beta.data(), d.B, d.T, 2, d.HV);
  la::options<float> finite;
  finite.check_finite = true;
  expect_error(in, "'beta' holds a negative value", finite);
  std::vector<float> long_keys = k;
  for (auto& x : long_keys) x *= 3.0f;
  in = good;
  in.k = la::view<const float>(long_keys.data(), d.B, d.T, 2, d.H, d.K);
  expect_error(in, "gives beta ||k||^2", finite);
  la::options<float> cp;
  std::vector<float> cps(100);
  cp.checkpoint_every = 1;
  cp.checkpoints = la::view(cps.data(), 2, 5, 2, 4, 3);
  expect_error(good, "'options.checkpoints' is set, expected none: GatedDeltaProduct writes no checkpoints", cp);
  la::chunkwise_forward<la::GatedDeltaProduct>(good, o);  // the good call runs
  CHECK(std::none_of(out.begin(), out.end(), [](float x) { return std::isnan(x); }));
}
