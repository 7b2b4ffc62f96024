// SPDX-License-Identifier: MIT
// options::normalize_qk: q and k rows divided by sqrt(||row||^2 + 1e-6) before the rule sees
// them. Every form of the harness's rules against the float64 reference that normalises first
// (rows scaled from 1e-3 to 1e2, so that the option changes the answer: the test also checks
// that the reference without normalisation is far off); the paths that read q and k outside
// the form table (the KV-cache decode of softmax attention, verify_drafts's record) and a
// rank-5 key (DeltaProduct) against the same call on inputs the test normalised itself; the
// check_finite bound on beta ||k||^2 taken on the normalised key. The gradients through the
// normalisation are in test_backward.cpp, 16-bit inputs in test_half_inputs.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/cases.hpp"
#include "support/catch.hpp"
#include "support/harness.hpp"

using namespace harness;

namespace {

/// A problem of the rule with unnormalised q and k and the option on.
template <class Rule>
ref::problem unnormalised_problem(std::mt19937_64& rng, ref::dims d, std::vector<std::int64_t> cu = {}) {
  ref::problem p = make_problem(rng, d, spec_of<Rule>(), gates::mild, true, std::move(cu));
  scale_rows(p.q, d.K, rng);
  scale_rows(p.k, d.K, rng);
  p.normalize_qk = true;
  return p;
}

/// x with every row of `width` elements divided by sqrt(||row||^2 + 1e-6).
std::vector<float> normalised(std::vector<float> x, int width) {
  for (std::size_t r = 0; r < x.size(); r += std::size_t(width)) {
    double ss = 0;
    for (int i = 0; i < width; ++i) ss += double(x[r + i]) * x[r + i];
    for (int i = 0; i < width; ++i) x[r + i] = float(x[r + i] / std::sqrt(ss + 1e-6));
  }
  return x;
}

/// max|a - b| / max|b|; infinite where a holds a NaN.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const double e = std::abs(double(a.at(i)) - double(b[i]));
    if (!(e <= d)) d = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
    m = std::max(m, double(std::abs(b[i])));
  }
  return d / m;
}

std::vector<float> random_vector(std::mt19937_64& rng, std::size_t n, double scale = 1.0) {
  std::normal_distribution<double> normal;
  std::vector<float> x(n);
  for (auto& e : x) e = float(scale * normal(rng));
  return x;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("normalize_qk: every form == the reference on normalised q and k", "[qk_norm]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(4101);
  const auto p = unnormalised_problem<Rule>(rng, {.B = 2, .T = 37, .H = 2, .HV = 4, .K = 12, .V = 7});
  const auto want = ref::run(p);
  ref::problem raw = p;
  raw.normalize_qk = false;
  CHECK(rel_err(ref::run(raw).o, want.o) > 0.1);  // the option matters on these inputs
  for (form f : all_forms) {
    CAPTURE(Rule::name, name(f));
    const auto got = run<Rule, T>(f, p, {.chunk = 16, .lay = layout::strided, .normalize_qk = true});
    CHECK(rel_err(got.r.o, want.o) < tolerance<T>());
    if (f != form::decode) CHECK(rel_err(got.r.s, want.s) < tolerance<T>());
    CHECK(got.padding_ok);
  }
}

TEMPLATE_LIST_TEST_CASE("normalize_qk: a packed batch with carried states", "[qk_norm][varlen]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  std::mt19937_64 rng(4102);
  const auto p = unnormalised_problem<Rule>(rng, {.B = 1, .T = 41, .H = 1, .HV = 2, .K = 9, .V = 16},
                                            {0, 6, 6, 23, 24, 41});
  const auto want = ref::run(p);
  for (form f : {form::recurrent, form::parallel, form::chunkwise}) {
    CAPTURE(Rule::name, name(f));
    const auto got = run<Rule, T>(f, p, {.chunk = 8, .threads = 2, .normalize_qk = true});
    CHECK(rel_err(got.r.o, want.o) < tolerance<T>());
    CHECK(rel_err(got.r.s, want.s) < tolerance<T>());
  }
}

TEST_CASE("normalize_qk: check_finite bounds beta ||k||^2 on the normalised key", "[qk_norm][validation]") {
  std::mt19937_64 rng(4103);
  const index_t T = 9, K = 8, V = 4;
  const auto q = random_vector(rng, T * K), k = random_vector(rng, T * K, 10.0), v = random_vector(rng, T * V);
  const std::vector<float> beta(T, 1.5f);
  std::vector<float> out(T * V, 7.0f);
  const la::Delta::inputs<float> in{.q = la::view(q.data(), 1, T, 1, K), .k = la::view(k.data(), 1, T, 1, K),
                                    .v = la::view(v.data(), 1, T, 1, V), .beta = la::view(beta.data(), 1, T, 1)};
  la::options<float> opt;
  opt.check_finite = true;
  std::string msg;
  try {
    la::chunkwise_forward<la::Delta>(in, la::view(out.data(), 1, T, 1, V), opt);
  } catch (const la::error& e) {
    msg = e.what();
  }
  CHECK(msg.find("'k'") != std::string::npos);
  CHECK(msg.find("> 2") != std::string::npos);
  CHECK(out == std::vector<float>(T * V, 7.0f));
  opt.normalize_qk = true;
  la::chunkwise_forward<la::Delta>(in, la::view(out.data(), 1, T, 1, V), opt);
  for (float o : out) CHECK(std::isfinite(o));
}

TEST_CASE("normalize_qk: softmax attention's forms and KV-cache decode == caller-normalised q and k",
          "[qk_norm][softmax]") {
  std::mt19937_64 rng(4104);
  const index_t B = 2, T = 11, H = 2, HV = 4, K = 6, V = 5;
  const auto q = random_vector(rng, B * T * H * K, 5.0), k = random_vector(rng, B * T * H * K, 0.2);
  const auto v = random_vector(rng, B * T * HV * V);
  const auto qn = normalised(q, K), kn = normalised(k, K);
  auto inputs = [&](const std::vector<float>& qq, const std::vector<float>& kk, index_t t0, index_t len) {
    const auto at = [&](const std::vector<float>& x, index_t width, index_t heads) {
      return la::tensor_view<const float, 4>(x.data() + t0 * heads * width, {B, len, heads, width},
                                             {T * heads * width, heads * width, width, 1});
    };
    return la::SoftmaxAttention::inputs<float>{.q = at(qq, K, H), .k = at(kk, K, H), .v = at(v, V, HV)};
  };
  auto out_view = [&](std::vector<float>& o, index_t t0, index_t len) {
    return la::tensor_view<float, 4>(o.data() + t0 * HV * V, {B, len, HV, V}, {T * HV * V, HV * V, V, 1});
  };
  std::vector<float> want(B * T * HV * V), got(want.size()), decoded(want.size());
  la::recurrent_forward<la::SoftmaxAttention>(inputs(qn, kn, 0, T), out_view(want, 0, T));
  la::options<float> opt;
  opt.normalize_qk = true;
  la::recurrent_forward<la::SoftmaxAttention>(inputs(q, k, 0, T), out_view(got, 0, T), opt);
  la::kv_cache<float> cache(B, H, HV, K, V);
  for (index_t t = 0; t < T; ++t)
    la::decode_step<la::SoftmaxAttention>(inputs(q, k, t, 1), out_view(decoded, t, 1), cache, opt);
  std::vector<float> raw(want.size());
  la::recurrent_forward<la::SoftmaxAttention>(inputs(q, k, 0, T), out_view(raw, 0, T));
  CHECK(relative_difference(got, want) <= 1e-5);
  CHECK(relative_difference(decoded, want) <= 1e-5);
  CHECK(relative_difference(raw, want) > 0.05);  // the option matters on these inputs
}

TEST_CASE("normalize_qk: DeltaProduct's keys (one per Householder step) and verify_drafts's record",
          "[qk_norm][delta_product][speculative]") {
  std::mt19937_64 rng(4105);
  const index_t B = 2, T = 19, S = 2, H = 1, HV = 2, K = 8, V = 6;
  const auto q = random_vector(rng, B * T * H * K, 3.0), k = random_vector(rng, B * T * S * H * K, 4.0);
  const auto v = random_vector(rng, B * T * S * HV * V);
  std::vector<float> g(B * T * HV), beta(B * T * S * HV);
  std::uniform_real_distribution<double> uniform(0.1, 0.9);
  for (auto& e : g) e = float(std::log(uniform(rng)));
  for (auto& e : beta) e = float(uniform(rng));
  const auto qn = normalised(q, K), kn = normalised(k, K);
  auto product_inputs = [&](const std::vector<float>& qq, const std::vector<float>& kk) {
    return la::GatedDeltaProduct::inputs<float>{.q = la::view(qq.data(), B, T, H, K), .k = la::view(kk.data(), B, T, S, H, K),
                                                .v = la::view(v.data(), B, T, S, HV, V), .g = la::view(g.data(), B, T, HV),
                                                .beta = la::view(beta.data(), B, T, S, HV)};
  };
  std::vector<float> want(B * T * HV * V), got(want.size());
  la::options<float> on;
  on.normalize_qk = true;
  on.chunk_size = 8;
  la::chunkwise_forward<la::GatedDeltaProduct>(product_inputs(qn, kn), la::view(want.data(), B, T, HV, V));
  la::chunkwise_forward<la::GatedDeltaProduct>(product_inputs(q, k), la::view(got.data(), B, T, HV, V), on);
  CHECK(relative_difference(got, want) < 1e-5);
  std::vector<float> raw(want.size());
  on.normalize_qk = false;
  la::chunkwise_forward<la::GatedDeltaProduct>(product_inputs(q, k), la::view(raw.data(), B, T, HV, V), on);
  on.normalize_qk = true;
  CHECK(relative_difference(raw, want) > 0.05);  // the option matters on these inputs

  // verify_drafts with a record (GatedDelta over the first key of each token), from a pool.
  std::vector<float> beta1(B * T * HV);
  for (auto& e : beta1) e = float(uniform(rng));
  auto gated_inputs = [&](const std::vector<float>& qq, const std::vector<float>& kk) {
    return la::GatedDelta::inputs<float>{
        .q = la::view(qq.data(), B, T, H, K),
        .k = la::tensor_view<const float, 4>(kk.data(), {B, T, H, K}, {T * S * H * K, S * H * K, K, 1}),
        .v = la::tensor_view<const float, 4>(v.data(), {B, T, HV, V}, {T * S * HV * V, S * HV * V, V, 1}),
        .g = la::view(g.data(), B, T, HV), .beta = la::view(beta1.data(), B, T, HV)};
  };
  const auto pool = random_vector(rng, B * HV * K * V);
  std::vector<float> keys(B * T * HV * K), updates(B * T * HV * V), decay(B * T * HV);
  const la::draft_record<float> record{la::view(keys.data(), B, T, HV, K), la::view(updates.data(), B, T, HV, V),
                                       la::view(decay.data(), B, T, HV, 1)};
  la::verify_drafts<la::GatedDelta>(gated_inputs(q, k), la::view(got.data(), B, T, HV, V),
                                    la::view(pool.data(), B, HV, K, V), record, on);
  la::options<float> from_pool;
  from_pool.initial_state = la::view(pool.data(), B, HV, K, V);
  la::recurrent_forward<la::GatedDelta>(gated_inputs(qn, kn), la::view(want.data(), B, T, HV, V), from_pool);
  CHECK(relative_difference(got, want) < 1e-5);
  on.normalize_qk = false;
  la::verify_drafts<la::GatedDelta>(gated_inputs(q, k), la::view(raw.data(), B, T, HV, V),
                                    la::view(pool.data(), B, HV, K, V), record, on);
  CHECK(relative_difference(raw, want) > 0.05);
}

TEST_CASE("normalize_qk: the same bits on 1, 2 and 3 threads, and after trim_scratch()", "[qk_norm][threads]") {
  std::mt19937_64 rng(4106);
  auto p = unnormalised_problem<la::GatedDelta>(rng, {.B = 2, .T = 300, .H = 2, .HV = 4, .K = 32, .V = 24});
  const auto first = run<la::GatedDelta, float>(form::chunkwise, p, {.chunk = 32, .threads = 1, .normalize_qk = true});
  for (int threads : {2, 3}) {
    la::trim_scratch();  // the next call leases new buffers
    const auto again = run<la::GatedDelta, float>(form::chunkwise, p, {.chunk = 32, .threads = threads, .normalize_qk = true});
    CAPTURE(threads);
    CHECK(again.r.o == first.r.o);
    CHECK(again.r.s == first.r.s);
  }
  CHECK(rel_err(first.r.o, ref::run(p).o) < tolerance<float>());
}
