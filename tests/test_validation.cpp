// SPDX-License-Identifier: MIT
// Every bad call throws linattn::error naming the argument, what it got and what was expected,
// and writes nothing: outputs and states are poisoned with NaN before the call and must still
// be NaN afterwards.
#include "support/catch.hpp"

#include <linattn/linattn.hpp>
#include "support/instantiations.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
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
constexpr index_t B = 2, T = 9, H = 2, HV = 4, K = 4, V = 3;

/// Valid buffers for a ScalarDecay / VectorDecay call (random, non-zero); out and states NaN.
struct call_data {
  std::vector<float> q, k, v, g, gv, s0, s1, o, state;
  call_data() {
    std::mt19937 rng(5);
    std::normal_distribution<float> n;
    auto rnd = [&](std::size_t size) {
      std::vector<float> x(size);
      for (auto& e : x) e = n(rng);
      return x;
    };
    q = rnd(B * T * H * K), k = rnd(B * T * H * K), v = rnd(B * T * HV * V);
    g = rnd(B * T * HV), gv = rnd(B * T * HV * K);
    for (auto& e : g) e = -std::abs(e);
    for (auto& e : gv) e = -std::abs(e);
    s0 = rnd(B * HV * K * V);
    state = rnd(B * 1 * HV * K * V);
    s1.assign(B * HV * K * V, fnan);
    o.assign(B * T * HV * V, fnan);
  }
  la::ScalarDecay::inputs<float> scalar() const {
    return {.q = la::view(q.data(), B, T, H, K), .k = la::view(k.data(), B, T, H, K),
            .v = la::view(v.data(), B, T, HV, V), .g = la::view(g.data(), B, T, HV)};
  }
  la::VectorDecay::inputs<float> vector() const {
    return {.q = la::view(q.data(), B, T, H, K), .k = la::view(k.data(), B, T, H, K),
            .v = la::view(v.data(), B, T, HV, V), .g = la::view(gv.data(), B, T, HV, K)};
  }
  la::tensor_view<float, 4> out() { return la::view(o.data(), B, T, HV, V); }
  la::options<float> opts() {
    la::options<float> opt;
    opt.initial_state = la::view(s0.data(), B, HV, K, V);
    opt.final_state = la::view(s1.data(), B, HV, K, V);
    return opt;
  }
};

bool all_nan(const std::vector<float>& x) {
  for (float e : x)
    if (!std::isnan(e)) return false;
  return true;
}

/// Expects `call` to throw linattn::error whose message contains every fragment, with the
/// output and final state untouched.
void expect_error(call_data& d, const std::function<void()>& call, const std::vector<std::string>& fragments) {
  std::string msg;
  try {
    call();
  } catch (const la::error& e) {
    msg = e.what();
  }
  INFO("message: " << msg);
  REQUIRE_FALSE(msg.empty());
  for (const auto& f : fragments) {
    INFO("expected fragment: " << f);
    CHECK(msg.find(f) != std::string::npos);
  }
  CHECK(all_nan(d.o));
  CHECK(all_nan(d.s1));
}

/// The message of the linattn::error that `call` throws (empty when it throws none).
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const la::error& e) {
    return e.what();
  }
  return {};
}

enum class form { recurrent, parallel, chunkwise };

template <class Rule>
void call(form f, const typename Rule::template inputs<float>& in, la::tensor_view<float, 4> out,
          const la::options<float>& opt) {
  if (f == form::recurrent) la::recurrent_forward<Rule>(in, out, opt);
  if (f == form::parallel) la::parallel_forward<Rule>(in, out, opt);
  if (f == form::chunkwise) la::chunkwise_forward<Rule>(in, out, opt);
}

}  // namespace

TEST_CASE("linattn::error is a std::invalid_argument", "[validation]") {
  call_data d;
  auto in = d.scalar();
  in.k = la::view(d.k.data(), B, T, H, K - 1);
  CHECK_THROWS_AS(la::chunkwise_forward<la::ScalarDecay>(in, d.out(), d.opts()), std::invalid_argument);
}

TEST_CASE("shape errors name the argument and the expected shape", "[validation]") {
  for (form f : {form::recurrent, form::parallel, form::chunkwise}) {
    CAPTURE(int(f));
    call_data d;
    const auto opt = d.opts();
    auto bad = [&](auto mutate, std::vector<std::string> fragments) {
      auto in = d.scalar();
      auto out = d.out();
      mutate(in, out);
      expect_error(d, [&] { call<la::ScalarDecay>(f, in, out, opt); }, fragments);
    };
    using In = la::ScalarDecay::inputs<float>;
    using Out = la::tensor_view<float, 4>;
    bad([](In& in, Out&) { in.q = {}; }, {"'q' is missing", "[B, T, H, K]"});
    bad([&](In& in, Out&) { in.k = la::view(d.k.data(), B, T, H, K - 1); },
        {"'k' has shape [2, 9, 2, 3]", "expected [B, T, H, K] (the shape of q) = [2, 9, 2, 4]"});
    bad([&](In& in, Out&) { in.v = la::view(d.v.data(), B, T - 1, HV, V); },
        {"'v' has shape [2, 8, 4, 3]", "expected [B, T, HV, V]"});
    bad([&](In& in, Out&) { in.v = la::view(d.v.data(), B, T, 3, V); },
        {"'v' has HV = 3 value heads", "multiple of H = 2"});
    bad([&](In& in, Out&) { in.g = la::view(d.g.data(), B, T, HV - 1); },
        {"'g' has shape [2, 9, 3]", "expected [B, T, HV] = [2, 9, 4]"});
    bad([&](In& in, Out&) { in.g = {}; }, {"'g' is missing", "[B, T, HV]"});
    bad([&](In&, Out& out) { out = la::view(d.o.data(), B, T, HV, V - 1); },
        {"'out' has shape [2, 9, 4, 2]", "expected [B, T, HV, V] = [2, 9, 4, 3]"});
    bad([&](In& in, Out&) { in.q = la::tensor_view<const float, 4>(nullptr, {B, T, H, K}, {T * H * K, H * K, K, 1}); },
        {"'q' has null data"});
  }
}

TEST_CASE("vector gates must be [B, T, HV, K]", "[validation]") {
  call_data d;
  auto in = d.vector();
  in.g = la::view(d.gv.data(), B, T, HV, K - 1);
  expect_error(d, [&] { la::chunkwise_forward<la::VectorDecay>(in, d.out(), d.opts()); },
               {"linattn::chunkwise_forward<VectorDecay>", "'g' has shape [2, 9, 4, 3]", "expected [B, T, HV, K] = [2, 9, 4, 4]"});
}

TEST_CASE("bad options are rejected", "[validation]") {
  call_data d;
  const auto in = d.scalar();
  auto with = [&](auto mutate) {
    auto opt = d.opts();
    mutate(opt);
    return opt;
  };
  using O = la::options<float>;
  expect_error(d, [&] { la::chunkwise_forward<la::ScalarDecay>(in, d.out(), with([](O& o) { o.chunk_size = 0; })); },
               {"'options.chunk_size' is 0, expected 1..256"});
  expect_error(d, [&] { la::chunkwise_forward<la::ScalarDecay>(in, d.out(), with([](O& o) { o.chunk_size = 257; })); },
               {"'options.chunk_size' is 257, expected 1..256"});
  expect_error(d, [&] { la::recurrent_forward<la::ScalarDecay>(in, d.out(), with([](O& o) { o.threads = -1; })); },
               {"'options.threads' is -1, expected >= 0"});
  expect_error(d, [&] { la::parallel_forward<la::ScalarDecay>(in, d.out(), with([](O& o) { o.scale = std::nan(""); })); },
               {"'options.scale'", "expected a finite number"});
  expect_error(d, [&] {
    la::chunkwise_forward<la::ScalarDecay>(in, d.out(), with([&](O& o) { o.initial_state = la::view(d.s0.data(), B, HV, V, K); }));
  }, {"'options.initial_state' has shape [2, 4, 3, 4]", "expected [N, HV, K, V] = [2, 4, 4, 3]"});
  expect_error(d, [&] {
    la::chunkwise_forward<la::ScalarDecay>(in, d.out(), with([&](O& o) { o.final_state = la::view(d.s1.data(), 1, HV, K, V); }));
  }, {"'options.final_state' has shape [1, 4, 4, 3]", "expected [N, HV, K, V] = [2, 4, 4, 3]"});
}

TEST_CASE("bad cu_seqlens are rejected", "[validation][varlen]") {
  call_data d;
  // A packed batch: B = 1, T = 2 * 9 tokens, in the same buffers.
  la::ScalarDecay::inputs<float> in{.q = la::view(d.q.data(), 1, 2 * T, H, K), .k = la::view(d.k.data(), 1, 2 * T, H, K),
                                    .v = la::view(d.v.data(), 1, 2 * T, HV, V), .g = la::view(d.g.data(), 1, 2 * T, HV)};
  const auto out = la::view(d.o.data(), 1, 2 * T, HV, V);
  auto with_cu = [&](std::vector<std::int64_t> cu, std::vector<std::string> fragments) {
    auto opt = d.opts();
    opt.cu_seqlens = la::view(cu.data(), cu.size());
    expect_error(d, [&] { la::chunkwise_forward<la::ScalarDecay>(in, out, opt); }, fragments);
  };
  with_cu({0, 10, 4, 18}, {"'options.cu_seqlens' is not sorted: entry 2 = 4 < entry 1 = 10"});
  with_cu({1, 10, 18}, {"'options.cu_seqlens' starts at 1, expected 0"});
  with_cu({0, 10, 17}, {"'options.cu_seqlens' ends at 17, expected T = 18"});
  with_cu({0}, {"'options.cu_seqlens' has 1 entries, expected N + 1 >= 2"});
  with_cu({0, 4, 9, 18}, {"'options.initial_state' has shape [2, 4, 4, 3]", "expected [N, HV, K, V] = [3, 4, 4, 3]"});
  // int32 offsets work too, and B must be 1.
  std::vector<std::int32_t> cu32{0, 4, 9};
  auto opt = d.opts();
  opt.cu_seqlens = la::view(cu32.data(), cu32.size());
  expect_error(d, [&] { la::chunkwise_forward<la::ScalarDecay>(d.scalar(), d.out(), opt); },
               {"'options.cu_seqlens' is set while q has B = 2, expected B == 1"});
}

TEST_CASE("outputs must not overlap inputs, states or themselves", "[validation]") {
  call_data d;
  const auto in = d.scalar();
  {  // out written over v's memory
    std::vector<float> shared = d.v;
    auto in2 = in;
    in2.v = la::view(shared.data(), B, T, HV, V);
    const auto before = shared;
    expect_error(d, [&] { la::chunkwise_forward<la::ScalarDecay>(in2, la::view(shared.data(), B, T, HV, V), d.opts()); },
                 {"'out' overlaps input 'v'"});
    CHECK(shared == before);
  }
  {  // out written over the gates' memory
    std::vector<float> shared(B * T * HV * V, -0.5f);
    auto in2 = in;
    in2.g = la::view(shared.data(), B, T, HV);
    expect_error(d, [&] { la::recurrent_forward<la::ScalarDecay>(in2, la::view(shared.data(), B, T, HV, V), d.opts()); },
                 {"'out' overlaps input 'g'"});
  }
  expect_error(d, [&] {
    la::chunkwise_forward<la::ScalarDecay>(in, la::view(d.o.data(), {B, T, HV, V}, {T * HV * V, HV * V, 0, 1}), d.opts());
  }, {"'out' has strides [108, 12, 0, 1]", "share memory"});
  {  // final_state half-overlapping initial_state
    auto opt = d.opts();
    std::vector<float> s(2 * B * HV * K * V, fnan);
    std::copy(d.s0.begin(), d.s0.end(), s.begin());
    const auto before = s;
    opt.initial_state = la::view(s.data(), B, HV, K, V);
    opt.final_state = la::view(s.data() + 5, B, HV, K, V);
    expect_error(d, [&] { la::chunkwise_forward<la::ScalarDecay>(in, d.out(), opt); },
                 {"'options.final_state' partly overlaps options.initial_state"});
    for (std::size_t i = 0; i < s.size(); ++i) CHECK((s[i] == before[i] || (std::isnan(s[i]) && std::isnan(before[i]))));
  }
  {  // final_state written over out's memory
    auto opt = d.opts();
    opt.final_state = la::view(d.o.data(), B, HV, K, V);
    expect_error(d, [&] { la::chunkwise_forward<la::ScalarDecay>(in, d.out(), opt); },
                 {"'options.final_state' overlaps 'out'"});
  }
}

TEST_CASE("check_finite scans inputs for NaN/Inf and positive log gates", "[validation]") {
  call_data d;
  auto opt = d.opts();
  opt.check_finite = true;
  d.k[7] = std::numeric_limits<float>::infinity();
  expect_error(d, [&] { la::recurrent_forward<la::ScalarDecay>(d.scalar(), d.out(), opt); },
               {"'k' holds a non-finite value", "at [0, 0, 1, 3]"});
  d.k[7] = 0.5f;
  d.g[5] = 0.25f;
  expect_error(d, [&] { la::recurrent_forward<la::ScalarDecay>(d.scalar(), d.out(), opt); },
               {"'g' holds a positive log gate (0.250000) at [0, 1, 1]", "expected <= 0"});
  d.g[5] = -0.25f;
  d.s0[3] = std::nanf("");
  expect_error(d, [&] { la::recurrent_forward<la::ScalarDecay>(d.scalar(), d.out(), opt); },
               {"'options.initial_state' holds a non-finite value"});
  d.s0[3] = 1.0f;
  la::recurrent_forward<la::ScalarDecay>(d.scalar(), d.out(), opt);  // now clean: runs
  CHECK_FALSE(std::isnan(d.o[0]));
}

TEST_CASE("check_finite rejects beta ||k||^2 > 2 (unnormalised keys) for the delta rules, naming the token", "[validation]") {
  call_data d;  // normal keys with K = 4: ||k||^2 around 4
  auto opt = d.opts();
  opt.check_finite = true;
  std::vector<float> beta(std::size_t(B * T * HV), 0.9f);
  const auto in = [&] {
    return la::GatedDelta::inputs<float>{.q = la::view<const float>(d.q.data(), B, T, H, K),
                                         .k = la::view<const float>(d.k.data(), B, T, H, K),
                                         .v = la::view<const float>(d.v.data(), B, T, HV, V),
                                         .g = la::view<const float>(d.g.data(), B, T, HV),
                                         .beta = la::view<const float>(beta.data(), B, T, HV)};
  };
  for (auto& g : d.g) g = -std::abs(g);
  // Unit keys except one: token (b = 1, t = 2) of q/k head 1, read by value heads 2 and 3.
  for (index_t r = 0; r < B * T * H; ++r) {
    float n2 = 0;
    for (index_t i = 0; i < K; ++i) n2 += d.k[std::size_t(r * K + i)] * d.k[std::size_t(r * K + i)];
    for (index_t i = 0; i < K; ++i) d.k[std::size_t(r * K + i)] /= std::sqrt(n2) * (r == (1 * T + 2) * H + 1 ? 0.5f : 1.0f);
  }
  expect_error(d, [&] { la::chunkwise_forward<la::GatedDelta>(in(), d.out(), opt); },
               {"'k' gives beta ||k||^2 = 3.6", "> 2 at token [1, 2, 2]", "L2-normalise the keys"});
  opt.check_finite = false;  // not scanned: runs (and follows the diverging recurrence)
  la::chunkwise_forward<la::GatedDelta>(in(), d.out(), opt);
  // Longhorn's beta = delta / (1 + delta ||k||^2) keeps beta ||k||^2 < 1 for any key: passes.
  opt.check_finite = true;
  const la::Longhorn::inputs<float> lh{.q = in().q, .k = in().k, .v = in().v, .delta = in().beta};
  la::chunkwise_forward<la::Longhorn>(lh, d.out(), opt);
  CHECK_FALSE(std::isnan(d.o[0]));
}

TEST_CASE("decode_step validates its state and refuses state options", "[validation][decode]") {
  call_data d;
  la::ScalarDecay::inputs<float> in{.q = la::view(d.q.data(), B, 1, H, K), .k = la::view(d.k.data(), B, 1, H, K),
                                    .v = la::view(d.v.data(), B, 1, HV, V), .g = la::view(d.g.data(), B, 1, HV)};
  const auto out = la::view(d.o.data(), B, 1, HV, V);
  const auto state_before = d.state;
  expect_error(d, [&] { la::decode_step<la::ScalarDecay>(in, out, la::view(d.state.data(), B, HV, V, K)); },
               {"linattn::decode_step<ScalarDecay>", "'state' has shape [2, 4, 3, 4]", "expected [N, HV, K, V] = [2, 4, 4, 3]"});
  expect_error(d, [&] { la::decode_step<la::ScalarDecay>(in, out, {}); }, {"'state' is missing"});
  la::options<float> opt;
  opt.initial_state = la::view(d.s0.data(), B, HV, K, V);
  expect_error(d, [&] { la::decode_step<la::ScalarDecay>(in, out, la::view(d.state.data(), B, HV, K, V), opt); },
               {"'options.initial_state' is set, expected none"});
  std::vector<std::int64_t> cu{0, 1};
  la::options<float> opt2;
  opt2.cu_seqlens = la::view(cu.data(), cu.size());
  expect_error(d, [&] { la::decode_step<la::ScalarDecay>(in, out, la::view(d.state.data(), B, HV, K, V), opt2); },
               {"'options.cu_seqlens' is set, expected none"});
  CHECK(d.state == state_before);
}

TEST_CASE("empty sequences (T = 0) with several batch rows are accepted and pass the state through", "[validation]") {
  call_data d;
  std::vector<float> q(1), k(1), v(1), g(1), o(1, fnan);  // no element is in any view
  la::ScalarDecay::inputs<float> in{.q = la::view(q.data(), B, index_t(0), H, K),
                                    .k = la::view(k.data(), B, index_t(0), H, K),
                                    .v = la::view(v.data(), B, index_t(0), HV, V),
                                    .g = la::view(g.data(), B, index_t(0), HV)};
  for (form f : {form::recurrent, form::parallel, form::chunkwise}) {
    std::fill(d.s1.begin(), d.s1.end(), fnan);
    call<la::ScalarDecay>(f, in, la::view(o.data(), B, index_t(0), HV, V), d.opts());
    CHECK(d.s1 == d.s0);
  }
}

TEST_CASE("outputs placed over the cu_seqlens offsets are rejected before anything is written", "[validation][varlen]") {
  // One packed row of T tokens in 3 sequences; the offsets sit inside the output's (or the
  // final state's) memory, so writing sequence 0 would change where sequence 1 starts.
  call_data d;
  const index_t N = 3;
  auto packed = [&](const std::vector<float>& x, index_t per_token) { return std::vector<float>(x.begin(), x.begin() + T * per_token); };
  const auto q = packed(d.q, H * K), k = packed(d.k, H * K), v = packed(d.v, HV * V), g = packed(d.g, HV);
  la::ScalarDecay::inputs<float> in{.q = la::view(q.data(), 1, T, H, K), .k = la::view(k.data(), 1, T, H, K),
                                    .v = la::view(v.data(), 1, T, HV, V), .g = la::view(g.data(), 1, T, HV)};
  const std::vector<index_t> offsets{0, 2, 7, T};
  for (form f : {form::recurrent, form::parallel, form::chunkwise}) {
    for (bool wide : {true, false}) {
      CAPTURE(int(f), wide);
      // out: [1, T, HV, V] floats; the offsets overwrite its first entries (same bytes).
      std::vector<std::int64_t> buf64(T * HV * V);
      std::vector<std::int32_t> buf32(T * HV * V);
      for (std::size_t i = 0; i < offsets.size(); ++i) buf64[i] = offsets[i], buf32[i] = std::int32_t(offsets[i]);
      la::options<float> opt;
      opt.threads = 2;
      float* out_ptr = wide ? reinterpret_cast<float*>(buf64.data()) : reinterpret_cast<float*>(buf32.data());
      if (wide) opt.cu_seqlens = la::view(buf64.data(), N + 1);
      else opt.cu_seqlens = la::view(buf32.data(), N + 1);
      const auto before64 = buf64;
      const auto before32 = buf32;
      const std::string msg = error_of([&] { call<la::ScalarDecay>(f, in, la::view(out_ptr, 1, T, HV, V), opt); });
      INFO(msg);
      CHECK(msg.find("'out' overlaps input 'options.cu_seqlens'") != std::string::npos);
      CHECK(buf64 == before64);
      CHECK(buf32 == before32);
    }
    // final_state over the offsets.
    std::vector<std::int64_t> offs(N * HV * K * V);
    std::copy(offsets.begin(), offsets.end(), offs.begin());
    const auto before = offs;
    la::options<float> opt;
    opt.cu_seqlens = la::view(offs.data(), N + 1);
    opt.final_state = la::view(reinterpret_cast<float*>(offs.data()), N, HV, K, V);
    std::vector<float> o(T * HV * V, fnan);
    const std::string msg = error_of([&] { call<la::ScalarDecay>(f, in, la::view(o.data(), 1, T, HV, V), opt); });
    INFO(msg);
    CHECK(msg.find("'options.final_state' overlaps input 'options.cu_seqlens'") != std::string::npos);
    CHECK(offs == before);
    CHECK(all_nan(o));
  }
}

TEST_CASE("outputs interleaved with inputs in one buffer are accepted when no element is shared", "[validation]") {
  // v and out in one [B, T, 2, HV, V] buffer: v at slot 0, out at slot 1 of the third axis.
  call_data d;
  const auto in0 = d.scalar();
  std::vector<float> ref(B * T * HV * V, fnan);
  la::chunkwise_forward<la::ScalarDecay>(in0, la::view(ref.data(), B, T, HV, V), d.opts());
  const index_t st[4] = {T * 2 * HV * V, 2 * HV * V, V, 1};  // [B, T, 2, HV, V] buffer
  std::vector<float> buf(B * T * 2 * HV * V, fnan);
  for (index_t b = 0; b < B; ++b)
    for (index_t t = 0; t < T; ++t)
      for (index_t i = 0; i < HV * V; ++i) buf[b * st[0] + t * st[1] + i] = d.v[(b * T + t) * HV * V + i];
  auto in = in0;
  in.v = la::view(static_cast<const float*>(buf.data()), {B, T, HV, V}, st);
  for (form f : {form::recurrent, form::parallel, form::chunkwise}) {
    CAPTURE(int(f));
    la::tensor_view<float, 4> out = la::view(buf.data() + HV * V, {B, T, HV, V}, st);
    call<la::ScalarDecay>(f, in, out, d.opts());
    double err = 0, norm = 0;
    for (index_t b = 0; b < B; ++b)
      for (index_t t = 0; t < T; ++t)
        for (index_t h = 0; h < HV; ++h)
          for (index_t j = 0; j < V; ++j) {
            err = std::max(err, double(std::abs(out(b, t, h, j) - ref[((b * T + t) * HV + h) * V + j])));
            norm = std::max(norm, double(std::abs(ref[((b * T + t) * HV + h) * V + j])));
          }
    CHECK(err <= 1e-5 * norm);
  }
  // The other direction: shifted by one element, out shares elements with v and is rejected.
  auto shifted = la::view(buf.data() + HV * V - 1, {B, T, HV, V}, st);
  const auto before = buf;
  CHECK(error_of([&] { la::chunkwise_forward<la::ScalarDecay>(in, shifted, d.opts()); }).find("'out' overlaps input 'v'") !=
        std::string::npos);
  CHECK(std::equal(buf.begin(), buf.end(), before.begin(), [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }));
}

TEST_CASE("output strides are rejected only when they make two elements share memory", "[validation]") {
  // Shape [2, 2, 3, 2] with strides [18, 9, 2, 3]: the (HV, V) offsets 0 2 4 / 3 5 7 interleave
  // but never coincide, so every element is distinct (an interval test would refuse it).
  const index_t b = 2, t = 2, hv = 3, v = 2, h = 1, k = 3;
  std::mt19937 rng(3);
  std::normal_distribution<float> n;
  std::vector<float> q(b * t * h * k), kk(b * t * h * k), vv(b * t * hv * v), g(b * t * hv);
  for (auto* x : {&q, &kk, &vv}) for (auto& e : *x) e = n(rng);
  for (auto& e : g) e = -std::abs(n(rng));
  la::ScalarDecay::inputs<float> in{.q = la::view(q.data(), b, t, h, k), .k = la::view(kk.data(), b, t, h, k),
                                    .v = la::view(vv.data(), b, t, hv, v), .g = la::view(g.data(), b, t, hv)};
  std::vector<float> ref(b * t * hv * v, fnan), buf(36, fnan);
  la::recurrent_forward<la::ScalarDecay>(in, la::view(ref.data(), b, t, hv, v));
  auto out = la::view(buf.data(), {b, t, hv, v}, {18, 9, 2, 3});
  la::chunkwise_forward<la::ScalarDecay>(in, out);
  for (index_t i0 = 0; i0 < b; ++i0)
    for (index_t i1 = 0; i1 < t; ++i1)
      for (index_t i2 = 0; i2 < hv; ++i2)
        for (index_t i3 = 0; i3 < v; ++i3)
          CHECK(std::abs(out(i0, i1, i2, i3) - ref[((i0 * t + i1) * hv + i2) * v + i3]) <= 1e-5f);
  // Strides [18, 9, 2, 4]: (HV, V) offsets 0 2 4 / 4 6 8 meet at 4.
  std::fill(buf.begin(), buf.end(), fnan);
  const std::string msg = error_of([&] { la::chunkwise_forward<la::ScalarDecay>(in, la::view(buf.data(), {b, t, hv, v}, {18, 9, 2, 4})); });
  INFO(msg);
  CHECK(msg.find("'out' has strides [18, 9, 2, 4]") != std::string::npos);
  CHECK(msg.find("share memory") != std::string::npos);
  CHECK(all_nan(buf));
}
