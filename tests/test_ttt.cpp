// SPDX-License-Identifier: MIT
// TTT-Linear (docs/math.md#ttt-linear) against the float64 oracle of
// tests/support/ttt_reference.hpp: docs/math.md#equivalences X1-X7, every form, packed batches,
// threads, hostile inputs.
#include <linattn/cpu/ttt/layer_norm.hpp>

#include "support/catch.hpp"
#include "support/ttt_harness.hpp"

using namespace ttt_harness;
using harness::rel_err;
using harness::tolerance;

namespace {

constexpr std::array<form, 4> all_forms{form::recurrent, form::parallel, form::chunkwise, form::decode};

/// Checks one library run against the oracle: outputs, final weights and bias (and the
/// cache when asked for), and that nothing outside the views was written.
template <class T>
void check_against(const outcome& got, const ttt_ref::result& want, bool cache) {
  CHECK(got.padding_ok);
  CHECK(rel_err(got.o, want.o) < tolerance<T>());
  CHECK(rel_err(got.w, cache ? want.w_start : want.w) < tolerance<T>());
  CHECK(rel_err(got.bias, cache ? want.bias_start : want.bias) < tolerance<T>());
  if (cache) CHECK(rel_err(got.cache, want.cache) < tolerance<T>());
}

}  // namespace

TEST_CASE("X1: the fused LayerNorm + L2 backward equals finite differences of the loss", "[ttt][X1]") {
  std::mt19937_64 rng(401);
  std::normal_distribution<double> normal;
  for (int D : {2, 7, 16}) {
    CAPTURE(D);
    ttt_ref::vec z(D), y(D), gam(D), bet(D);
    for (int i = 0; i < D; ++i) z[i] = 2 * normal(rng), y[i] = normal(rng), gam[i] = 1 + 0.3 * normal(rng), bet[i] = 0.3 * normal(rng);
    // central differences of ell(z) = 1/2 ||LN(z) - y||^2
    ttt_ref::vec fd(D);
    const double h = 1e-5;
    for (int i = 0; i < D; ++i) {
      auto zp = z, zm = z;
      zp[i] += h, zm[i] -= h;
      fd[i] = (ttt_ref::loss(zp, y, gam, bet) - ttt_ref::loss(zm, y, gam, bet)) / (2 * h);
    }
    CHECK(rel_err(ttt_ref::grad_z(z, y, gam, bet), fd) < 1e-6);

    // the library's fused backward (double and float)
    using linattn::cpu::mat;
    using linattn::cpu::row_vec;
    using linattn::cpu::col_vec;
    mat<double> Z(1, D), Y(1, D), G(1, D);
    row_vec<double> g(D), b(D);
    col_vec<double> rstd(1), s1(1), s2(1);
    for (int i = 0; i < D; ++i) Z(0, i) = z[i], Y(0, i) = y[i], g(i) = gam[i], b(i) = bet[i];
    linattn::cpu::ttt_normalise_rows<double>(Z, rstd, 1e-6);
    linattn::cpu::ttt_layer_norm_l2_grad<double>(Z, rstd, Y, g, b, G, s1, s2);
    CHECK(rel_err(std::vector<double>(G.data(), G.data() + D), fd) < 1e-6);
    mat<float> Zf = Z.cast<float>(), Yf = Y.cast<float>(), Gf(1, D);
    col_vec<float> rf(1), s1f(1), s2f(1);
    for (int i = 0; i < D; ++i) Zf(0, i) = float(z[i]);
    linattn::cpu::ttt_normalise_rows<float>(Zf, rf, 1e-6f);
    linattn::cpu::ttt_layer_norm_l2_grad<float>(Zf, rf, Yf, g.cast<float>(), b.cast<float>(), Gf, s1f, s2f);
    const mat<double> Gd = Gf.cast<double>();
    if (D > 2)  // D = 2: LN(z) = ±gam + bet, the gradient is ~eps-sized and float keeps no digits of it
      CHECK(rel_err(std::vector<double>(Gd.data(), Gd.data() + D), fd) < 1e-4);

    // chain rule through z = S k + b: dl/dS = g_z k^T (the rank-1 weight gradient)
    ttt_ref::matrix S(D, ttt_ref::vec(D));
    ttt_ref::vec k(D), bias(D);
    for (int i = 0; i < D; ++i) {
      k[i] = normal(rng), bias[i] = normal(rng);
      for (int j = 0; j < D; ++j) S[i][j] = 0.3 * normal(rng);
    }
    auto z_of = [&](const ttt_ref::matrix& M) {
      auto zz = ttt_ref::mat_vec(M, k);
      for (int i = 0; i < D; ++i) zz[i] += bias[i];
      return zz;
    };
    const auto gz = ttt_ref::grad_z(z_of(S), y, gam, bet);
    std::vector<double> fdS, anS;
    for (int i = 0; i < D; ++i)
      for (int j = 0; j < D; ++j) {
        auto Sp = S, Sm = S;
        Sp[i][j] += h, Sm[i][j] -= h;
        fdS.push_back((ttt_ref::loss(z_of(Sp), y, gam, bet) - ttt_ref::loss(z_of(Sm), y, gam, bet)) / (2 * h));
        anS.push_back(gz[i] * k[j]);
      }
    CHECK(rel_err(anS, fdS) < 1e-6);
  }
}

TEMPLATE_TEST_CASE("X2: primal, dual, parallel and decode equal the mini-batch definition (L = 37, partial last mini-batch)",
                   "[ttt][X2]", float, double) {
  std::mt19937_64 rng(402);
  for (int mb : {16, 4, 3}) {
    CAPTURE(mb);
    const auto p = make_problem(rng, {.B = 2, .T = 37, .H = 2, .HV = 4, .D = 8, .mb = mb});
    const auto want = ttt_ref::run(p);
    for (form f : all_forms)
      for (layout lay : {layout::contiguous, layout::strided}) {
        CAPTURE(harness::name(f), lay == layout::strided);
        check_against<TestType>(run<TestType>(f, p, {.chunk = 2 * mb, .lay = lay}), want, f == form::decode);
      }
    // dual == primal directly, outputs and state
    const auto primal = run<TestType>(form::recurrent, p);
    const auto dual = run<TestType>(form::chunkwise, p, {.chunk = mb});
    CHECK(rel_err(dual.o, primal.o) < tolerance<TestType>());
    CHECK(rel_err(dual.w, primal.w) < tolerance<TestType>());
    CHECK(rel_err(dual.bias, primal.bias) < tolerance<TestType>());
  }
}

TEMPLATE_TEST_CASE("X2: odd head dim, no start state, one head, a query scale", "[ttt][X2]", float, double) {
  std::mt19937_64 rng(412);
  auto p = make_problem(rng, {.B = 1, .T = 23, .H = 1, .HV = 1, .D = 5, .mb = 4}, false);
  p.scale = 0.7;
  const auto want = ttt_ref::run(p);
  for (form f : all_forms) {
    CAPTURE(harness::name(f));
    check_against<TestType>(run<TestType>(f, p, {.chunk = 8}), want, f == form::decode);
  }
}

TEMPLATE_TEST_CASE("X2: production head size D = 64 with b = 16 and tiles of 64", "[ttt][X2]", float, double) {
  std::mt19937_64 rng(413);
  const auto p = make_problem(rng, {.B = 1, .T = 83, .H = 1, .HV = 2, .D = 64, .mb = 16});
  const auto want = ttt_ref::run(p);
  for (form f : all_forms) {
    CAPTURE(harness::name(f));
    check_against<TestType>(run<TestType>(f, p, {.chunk = 64}), want, f == form::decode);
  }
}

TEMPLATE_TEST_CASE("X2: the fixed-size whole-mini-batch kernels (D = 64, 128 with b = 16) next to the general path",
                   "[ttt][X2]", float, double) {
  // D = 64 and 128 with b = 16 run whole mini-batches through ttt_mini_batch.hpp; a cache
  // carried in off a boundary and a partial last mini-batch take the general block products
  // in the same call. Learned tau, non-unit LayerNorm parameters, strided layouts.
  std::mt19937_64 rng(414);
  for (int D : {64, 128}) {
    CAPTURE(D);
    auto p = make_problem(rng, {.B = 1, .T = 71, .H = 1, .HV = 2, .D = D, .mb = 16});
    p.tau = random_tau(rng, p.mb);
    const auto want = ttt_ref::run(p);
    for (layout lay : {layout::contiguous, layout::strided}) {
      CAPTURE(lay == layout::strided);
      check_against<TestType>(run<TestType>(form::chunkwise, p, {.chunk = 32, .lay = lay}), want, false);
      check_against<TestType>(run<TestType>(form::parallel, p, {.lay = lay}), want, false);
    }
    const int h = 21;  // off a boundary: the second call starts 5 tokens into a mini-batch
    const config with_cache{.chunk = 16, .want_cache = true};
    const auto first = run<TestType>(form::chunkwise, slice_time(p, 0, h, p.w0, p.b0, {}), with_cache);
    const auto second = run<TestType>(form::chunkwise, slice_time(p, h, p.T, first.w, first.bias, first.cache), with_cache);
    CHECK(rel_err(second.o, rows(want.o, p, h, p.T)) < tolerance<TestType>());
    CHECK(rel_err(second.w, want.w_start) < tolerance<TestType>());
    CHECK(rel_err(second.cache, want.cache) < tolerance<TestType>());
  }
}

TEMPLATE_TEST_CASE("X3: b = 1 is the sequential online gradient-descent loop", "[ttt][X3]", float, double) {
  std::mt19937_64 rng(403);
  auto p = make_problem(rng, {.B = 2, .T = 29, .H = 1, .HV = 2, .D = 6, .mb = 1});
  const auto want = ttt_ref::online_gd(p);
  for (form f : all_forms)
    for (index_t chunk : {1, 4}) {
      CAPTURE(harness::name(f), chunk);
      const auto got = run<TestType>(f, p, {.chunk = chunk});
      CHECK(rel_err(got.o, want.o) < tolerance<TestType>());
      CHECK(rel_err(got.w, want.w) < tolerance<TestType>());
      CHECK(rel_err(got.bias, want.bias) < tolerance<TestType>());
    }
  // and b = 4 is a different model (guards against an implementation that ignores b)
  p.mb = 4;
  CHECK(rel_err(run<TestType>(form::chunkwise, p, {.chunk = 4}).o, want.o) > 1e-3);
}

TEMPLATE_TEST_CASE("X4: state carry at and off mini-batch boundaries", "[ttt][X4]", float, double) {
  std::mt19937_64 rng(404);
  const auto p = make_problem(rng, {.B = 2, .T = 45, .H = 2, .HV = 2, .D = 8, .mb = 8});
  const auto whole = ttt_ref::run(p);
  for (form f : {form::recurrent, form::chunkwise, form::parallel})
    for (int h : {16, 8, 21, 3, 1}) {
      CAPTURE(harness::name(f), h);
      const config with_cache{.chunk = 16, .want_cache = true};
      const auto first = run<TestType>(f, slice_time(p, 0, h, p.w0, p.b0, {}), with_cache);
      const auto second = run<TestType>(f, slice_time(p, h, p.T, first.w, first.bias, first.cache), with_cache);
      CHECK(rel_err(first.o, rows(whole.o, p, 0, h)) < tolerance<TestType>());
      CHECK(rel_err(second.o, rows(whole.o, p, h, p.T)) < tolerance<TestType>());
      CHECK(rel_err(second.w, whole.w_start) < tolerance<TestType>());
      CHECK(rel_err(second.bias, whole.bias_start) < tolerance<TestType>());
      CHECK(rel_err(second.cache, whole.cache) < tolerance<TestType>());
      if (h % p.mb == 0) {  // aligned: the weights alone carry the state
        const auto a = run<TestType>(f, slice_time(p, 0, h, p.w0, p.b0, {}));
        const auto b = run<TestType>(f, slice_time(p, h, p.T, a.w, a.bias, {}));
        CHECK(rel_err(b.o, rows(whole.o, p, h, p.T)) < tolerance<TestType>());
        CHECK(rel_err(b.w, whole.w) < tolerance<TestType>());
      } else {  // off a boundary the cache is needed: folding it in restarts the mini-batch
        const auto a = run<TestType>(f, slice_time(p, 0, h, p.w0, p.b0, {}));
        const auto b = run<TestType>(f, slice_time(p, h, p.T, a.w, a.bias, {}));
        CHECK(rel_err(b.o, rows(whole.o, p, h, p.T)) > 1e-3);
      }
    }
}

TEMPLATE_TEST_CASE("X5: token-by-token decode with the cache reproduces prefill", "[ttt][X5]", float, double) {
  std::mt19937_64 rng(405);
  const auto p = make_problem(rng, {.B = 3, .T = 37, .H = 1, .HV = 2, .D = 8, .mb = 16});
  const auto decoded = run<TestType>(form::decode, p);
  for (form f : {form::recurrent, form::chunkwise, form::parallel}) {
    CAPTURE(harness::name(f));
    const auto prefill = run<TestType>(f, p, {.chunk = 32, .want_cache = true});
    CHECK(rel_err(decoded.o, prefill.o) < tolerance<TestType>());
    CHECK(rel_err(decoded.w, prefill.w) < tolerance<TestType>());
    CHECK(rel_err(decoded.bias, prefill.bias) < tolerance<TestType>());
    CHECK(rel_err(decoded.cache, prefill.cache) < tolerance<TestType>());
  }
  // prefill 21 tokens (off a boundary), then decode the rest from the returned cache
  const auto head = run<TestType>(form::chunkwise, slice_time(p, 0, 21, p.w0, p.b0, {}), {.chunk = 16, .want_cache = true});
  const auto tail = run<TestType>(form::decode, slice_time(p, 21, p.T, head.w, head.bias, head.cache));
  CHECK(rel_err(tail.o, rows(decoded.o, p, 21, p.T)) < tolerance<TestType>());
  CHECK(rel_err(tail.cache, decoded.cache) < tolerance<TestType>());
}

TEMPLATE_TEST_CASE("X6: the linear inner model with b = 1 is DeltaNet with beta = eta", "[ttt][X6]", float, double) {
  std::mt19937_64 rng(406);
  auto p = make_problem(rng, {.B = 2, .T = 33, .H = 2, .HV = 2, .D = 6, .mb = 1});
  p.linear = true;
  p.b0.clear();
  const auto lin = ttt_ref::run(p);
  CHECK(rel_err(lin.o, ttt_ref::online_gd(p).o) < 1e-12);
  ref::problem d;  // the same problem for the library's Delta rule (state layout S^T = W)
  d.d = {.B = p.B, .T = p.T, .H = p.H, .HV = p.HV, .K = p.D, .V = p.D};
  d.rule = ref::update::delta;
  d.q = p.q, d.k = p.k, d.v = p.v, d.beta = p.eta, d.s0 = p.w0;
  for (form f : all_forms) {
    CAPTURE(harness::name(f));
    const auto got = harness::run<linattn::Delta, TestType>(f, d, {.chunk = 8, .explicit_scale = true});
    CHECK(rel_err(got.r.o, lin.o) < tolerance<TestType>());
    CHECK(rel_err(got.r.s, lin.w) < tolerance<TestType>());
  }
  // with b > 1 the linear model is the mini-batch delta rule, not DeltaNet
  p.mb = 4;
  CHECK(rel_err(ttt_ref::run(p).o, lin.o) > 1e-3);
}

TEMPLATE_TEST_CASE("X7: tau defaults to 1/i, learned tau is honoured, tiles 2b and 4b equal tile b", "[ttt][X7]",
                   float, double) {
  std::mt19937_64 rng(407);
  auto p = make_problem(rng, {.B = 2, .T = 50, .H = 1, .HV = 2, .D = 8, .mb = 8});
  // lam = 0: tau omitted == tau = 1/i given explicitly == the oracle's 1/i
  auto explicit_tau = p;
  for (int i = 1; i <= p.mb; ++i) explicit_tau.tau.push_back(1.0 / i);
  const auto want = ttt_ref::run(p);
  for (form f : all_forms) {
    CAPTURE(harness::name(f));
    const auto a = run<TestType>(f, explicit_tau, {.chunk = 8});
    const auto b = run<TestType>(f, explicit_tau, {.chunk = 8, .omit_tau = true});
    check_against<TestType>(a, want, f == form::decode);
    CHECK(rel_err(a.o, b.o) == 0.0);
  }
  // learned tau
  auto learned = p;
  learned.tau = random_tau(rng, p.mb);
  const auto want_learned = ttt_ref::run(learned);
  CHECK(rel_err(want_learned.o, want.o) > 1e-3);
  for (form f : all_forms) {
    CAPTURE(harness::name(f));
    check_against<TestType>(run<TestType>(f, learned, {.chunk = 8}), want_learned, f == form::decode);
  }
  // tile size
  const auto tile_b = run<TestType>(form::chunkwise, learned, {.chunk = 8});
  for (index_t chunk : {16, 32, 64}) {
    CAPTURE(chunk);
    const auto tile = run<TestType>(form::chunkwise, learned, {.chunk = chunk});
    CHECK(rel_err(tile.o, tile_b.o) < tolerance<TestType>() * 1e-2);
    CHECK(rel_err(tile.w, tile_b.w) < tolerance<TestType>() * 1e-2);
  }
}

TEMPLATE_TEST_CASE("TTT packed batches (cu_seqlens) incl. empty and one-token sequences", "[ttt][varlen]", float, double) {
  std::mt19937_64 rng(408);
  const std::vector<std::int64_t> cu{0, 0, 1, 18, 18, 41, 44};
  const auto p = make_problem(rng, {.B = 1, .T = 44, .H = 2, .HV = 4, .D = 6, .mb = 4}, true, cu);
  const auto want = ttt_ref::run(p);
  for (form f : {form::recurrent, form::chunkwise, form::parallel})
    for (bool cache : {false, true}) {
      CAPTURE(harness::name(f), cache);
      check_against<TestType>(run<TestType>(f, p, {.chunk = 8, .want_cache = cache}), want, cache);
    }
  // the same sequences run separately
  for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
    CAPTURE(n);
    auto one = slice_time(p, int(cu[n]), int(cu[n + 1]), {}, {}, {});
    one.cu.clear();
    one.w0.assign(p.w0.begin() + n * p.HV * p.D * p.D, p.w0.begin() + (n + 1) * p.HV * p.D * p.D);
    one.b0.assign(p.b0.begin() + n * p.HV * p.D, p.b0.begin() + (n + 1) * p.HV * p.D);
    const auto sep = run<TestType>(form::chunkwise, one, {.chunk = 8});
    std::vector<double> w_n(want.w.begin() + n * p.HV * p.D * p.D, want.w.begin() + (n + 1) * p.HV * p.D * p.D);
    CHECK(rel_err(sep.w, w_n) < tolerance<TestType>());
  }
}

TEMPLATE_TEST_CASE("TTT results do not depend on the thread count", "[ttt][threads]", float, double) {
  std::mt19937_64 rng(409);
  const auto p = make_problem(rng, {.B = 3, .T = 20, .H = 2, .HV = 4, .D = 8, .mb = 4});
  for (form f : all_forms) {
    CAPTURE(harness::name(f));
    const auto one = run<TestType>(f, p, {.chunk = 8, .threads = 1});
    const auto two = run<TestType>(f, p, {.chunk = 8, .threads = 2});
    CHECK(rel_err(one.o, two.o) == 0.0);
    CHECK(rel_err(one.w, two.w) == 0.0);
  }
}

TEMPLATE_TEST_CASE("TTT hostile inputs: constant pre-norm rows, huge values, zero steps", "[ttt][robustness]", float,
                   double) {
  std::mt19937_64 rng(410);
  auto p = make_problem(rng, {.B = 1, .T = 19, .H = 1, .HV = 1, .D = 8, .mb = 4}, false);
  // W0 = 0, b0 = 0 and keys 0 for the first mini-batch: z = 0, sd = sqrt(eps) (LN's 1/sd = 1000)
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < p.D; ++i) p.k[p.qk_at(0, t, 0, i)] = 0.0;
  for (int i = 0; i < 3 * p.D; ++i) p.v[std::size_t(i)] *= 1e3;  // large targets early on
  p.eta[5] = 0.0;                                                // a zero step
  const auto want = ttt_ref::run(p);
  for (form f : all_forms) {
    CAPTURE(harness::name(f));
    const auto got = run<TestType>(f, p, {.chunk = 8});
    for (double x : got.o) CHECK(std::isfinite(x));
    CHECK(rel_err(got.o, want.o) < tolerance<TestType>());
  }
}
