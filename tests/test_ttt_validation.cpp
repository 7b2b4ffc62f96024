// SPDX-License-Identifier: MIT
// Bad TTTLinear calls throw linattn::error naming the argument and what was expected, and
// write nothing (outputs and states stay NaN).
#include "support/catch.hpp"

#include <linattn/linattn.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace la = linattn;
using la::index_t;

namespace {

constexpr float fnan = std::numeric_limits<float>::quiet_NaN();
constexpr index_t B = 2, T = 10, H = 2, D = 4, MB = 4;

/// A valid call (random, non-zero inputs); outputs and states NaN.
struct call_data {
  std::vector<float> q, k, v, eta, gam, bet, tau, w0, b0, c0, o, w1, b1, c1;
  call_data() {
    std::mt19937 rng(7);
    std::normal_distribution<float> n;
    auto rnd = [&](std::size_t size) {
      std::vector<float> x(size);
      for (auto& e : x) e = n(rng);
      return x;
    };
    q = rnd(B * T * H * D), k = rnd(B * T * H * D), v = rnd(B * T * H * D), eta = rnd(B * T * H);
    gam = rnd(H * D), bet = rnd(H * D), tau = rnd(MB);
    w0 = rnd(B * H * D * D), b0 = rnd(B * H * D), c0 = rnd(B * H * (D + 2) * D);
    for (index_t i = 0; i < B * H; ++i)  // valid positions 0..MB-1
      for (index_t j = 0; j < D; ++j) c0[std::size_t((i * (D + 2) + D + 1) * D + j)] = j == 0 ? float(i % MB) : 0.0f;
    o.assign(q.size(), fnan), w1.assign(w0.size(), fnan), b1.assign(b0.size(), fnan), c1.assign(c0.size(), fnan);
  }
  la::TTTLinear::inputs<float> inputs() {
    return {.q = la::view(q.data(), B, T, H, D), .k = la::view(k.data(), B, T, H, D),
            .v = la::view(v.data(), B, T, H, D), .eta = la::view(eta.data(), B, T, H),
            .ln_weight = la::view(gam.data(), H, D), .ln_bias = la::view(bet.data(), H, D),
            .tau = la::view(tau.data(), MB), .mini_batch = MB,
            .initial_bias = la::view(b0.data(), B, H, D), .final_bias = la::view(b1.data(), B, H, D),
            .initial_cache = la::view(c0.data(), B, H, D + 2, D), .final_cache = la::view(c1.data(), B, H, D + 2, D)};
  }
  la::options<float> opts() {
    la::options<float> opt;
    opt.chunk_size = 8;
    opt.initial_state = la::view(w0.data(), B, H, D, D);
    opt.final_state = la::view(w1.data(), B, H, D, D);
    return opt;
  }
  la::tensor_view<float, 4> out() { return la::view(o.data(), B, T, H, D); }
  bool untouched() const {
    for (const auto* x : {&o, &w1, &b1, &c1})
      for (float e : *x)
        if (!std::isnan(e)) return false;
    return true;
  }
};

using mutate = std::function<void(call_data&, la::TTTLinear::inputs<float>&, la::options<float>&)>;

/// Runs the chunkwise form (or decode) with the mutation applied and expects an error whose
/// message contains every fragment, with nothing written.
void expect_error(const mutate& m, std::vector<std::string> fragments, bool decode = false) {
  call_data d;
  auto in = d.inputs();
  auto opt = d.opts();
  m(d, in, opt);
  try {
    if (decode) {
      la::options<float> plain;
      auto out = in.q.given() ? la::view(d.o.data(), B, in.q.extent(1), H, D) : d.out();
      la::decode_step<la::TTTLinear>(in, out, la::view(d.w1.data(), B, H, D, D), plain);
    } else {
      la::chunkwise_forward<la::TTTLinear>(in, d.out(), opt);
    }
    FAIL("no linattn::error thrown");
  } catch (const la::error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("TTTLinear") != std::string::npos);
    for (const auto& f : fragments) CHECK(what.find(f) != std::string::npos);
  }
  if (!decode) CHECK(d.untouched());
}

}  // namespace

TEST_CASE("TTT validation: the valid call runs and writes everything", "[ttt][validation]") {
  call_data d;
  auto in = d.inputs();
  la::chunkwise_forward<la::TTTLinear>(in, d.out(), d.opts());
  for (const auto* x : {&d.o, &d.w1, &d.b1, &d.c1})
    for (float e : *x) CHECK(std::isfinite(e));
}

TEST_CASE("TTT validation: shapes and sizes", "[ttt][validation]") {
  expect_error([](call_data& d, auto& in, auto&) { in.v = la::view(d.v.data(), B, T, H, D - 1); },
               {"'v'", "V = K"});
  expect_error([](call_data& d, auto& in, auto&) { in.eta = la::view(d.eta.data(), B, T - 1, H); }, {"'eta'", "[B, T, HV]"});
  expect_error([](call_data&, auto& in, auto&) { in.ln_weight = {}; }, {"'ln_weight'", "missing", "[HV, D]"});
  expect_error([](call_data& d, auto& in, auto&) { in.ln_bias = la::view(d.bet.data(), H, D - 1); }, {"'ln_bias'", "[HV, D]"});
  expect_error([](call_data& d, auto& in, auto&) { in.tau = la::view(d.tau.data(), MB - 1); }, {"'tau'", "[mini_batch]"});
  expect_error([](call_data& d, auto& in, auto&) { in.initial_bias = la::view(d.b0.data(), B, H, D - 1); },
               {"'initial_bias'", "[N, HV, D]"});
  expect_error([](call_data& d, auto& in, auto&) { in.final_cache = la::view(d.c1.data(), B, H, D + 1, D); },
               {"'final_cache'", "[N, HV, D + 2, D]"});
}

TEST_CASE("TTT validation: mini-batch and chunk sizes", "[ttt][validation]") {
  expect_error([](call_data&, auto& in, auto&) { in.mini_batch = 0, in.tau = {}; }, {"'mini_batch'", "1..256"});
  expect_error([](call_data&, auto& in, auto&) { in.mini_batch = 300, in.tau = {}; }, {"'mini_batch'", "1..256"});
  expect_error([](call_data&, auto&, auto& opt) { opt.chunk_size = 6; }, {"'options.chunk_size'", "multiple", "mini_batch = 4"});
}

TEST_CASE("TTT validation: cache positions must be integers from 0 to mini_batch - 1", "[ttt][validation]") {
  for (float bad : {1.5f, float(MB), -1.0f, fnan}) {
    CAPTURE(bad);
    expect_error([bad](call_data& d, auto&, auto&) { d.c0[std::size_t((D + 1) * D)] = bad; }, {"'initial_cache'", "position"});
  }
}

TEST_CASE("TTT validation: memory overlaps", "[ttt][validation]") {
  expect_error([](call_data& d, auto& in, auto&) { in.final_bias = la::view(d.o.data(), B, H, D); }, {"'out'", "final_bias"});
  expect_error([](call_data& d, auto&, auto& opt) { opt.final_state = la::view(d.c1.data(), B, H, D, D); },
               {"'options.final_state'", "final_cache"});
  expect_error([](call_data& d, auto& in, auto&) { in.final_bias = la::view(d.b0.data() + 1, B, H, D); },
               {"'final_bias'", "initial_bias", "in place"});
  expect_error([](call_data& d, auto& in, auto&) { in.final_bias = la::view(d.eta.data(), B, H, D); },
               {"'final_bias'", "overlaps input 'eta'"});
  expect_error([](call_data& d, auto& in, auto&) { in.final_bias = la::view(d.b1.data(), {B, H, D}, {0, D, 1}); },
               {"'final_bias'", "share memory"});
}

TEST_CASE("TTT validation: in place is allowed for bias and cache", "[ttt][validation]") {
  call_data d;
  auto in = d.inputs();
  in.final_bias = la::view(d.b0.data(), B, H, D);
  in.final_cache = la::view(d.c0.data(), B, H, D + 2, D);
  auto opt = d.opts();
  opt.final_state = la::view(d.w0.data(), B, H, D, D);
  la::chunkwise_forward<la::TTTLinear>(in, d.out(), opt);
  for (float e : d.o) CHECK(std::isfinite(e));
}

TEST_CASE("TTT validation: decode needs final_bias and final_cache", "[ttt][validation]") {
  expect_error(
      [](call_data& d, auto& in, auto&) {
        in.q = la::view(d.q.data(), B, 1, H, D), in.k = la::view(d.k.data(), B, 1, H, D);
        in.v = la::view(d.v.data(), B, 1, H, D), in.eta = la::view(d.eta.data(), B, 1, H);
        in.final_cache = {};
      },
      {"'final_cache'", "missing"}, true);
  expect_error(
      [](call_data& d, auto& in, auto&) {
        in.q = la::view(d.q.data(), B, 1, H, D), in.k = la::view(d.k.data(), B, 1, H, D);
        in.v = la::view(d.v.data(), B, 1, H, D), in.eta = la::view(d.eta.data(), B, 1, H);
        in.final_bias = {};
      },
      {"'final_bias'", "missing"}, true);
}

TEST_CASE("TTT validation: check_finite scans the LayerNorm parameters and carried state", "[ttt][validation]") {
  expect_error([](call_data& d, auto&, auto& opt) { d.gam[3] = fnan, opt.check_finite = true; }, {"'ln_weight'", "non-finite"});
  expect_error([](call_data& d, auto&, auto& opt) { d.b0[2] = fnan, opt.check_finite = true; }, {"'initial_bias'", "non-finite"});
  expect_error([](call_data& d, auto&, auto& opt) { d.eta[1] = fnan, opt.check_finite = true; }, {"'eta'", "non-finite"});
}
