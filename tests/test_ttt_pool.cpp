// SPDX-License-Identifier: MIT
// TTT-Linear through a state pool (options::state_indices): the weights, the bias and the
// mini-batch cache are three pool views indexed by the same slots. Every form and decode must
// give the bits of the same call on the gathered per-sequence states, write exactly the slots
// named, and reject bad pools before writing anything.
#include "support/catch.hpp"

#include "support/harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace la = linattn;
using la::index_t;

namespace {

using harness::form;

constexpr index_t H = 2, HV = 4, D = 8, MB = 4, P = 5;

/// One sequence's state: W [HV, D, D], bias [HV, D], cache [HV, D + 2, D].
constexpr index_t w_size = HV * D * D, b_size = HV * D, c_size = HV * (D + 2) * D;

/// A TTT problem of N sequences (batch rows, or packed when `lengths` has several entries and
/// `packed`), random inputs.
template <class T>
struct problem {
  index_t B, Tn, N;
  std::vector<std::int64_t> cu;  // packed offsets, empty for batch rows
  std::vector<T> q, k, v, eta, gam, bet;

  problem(std::mt19937_64& rng, std::vector<index_t> lengths, bool packed) {
    N = index_t(lengths.size());
    if (packed) {
      B = 1, Tn = 0;
      cu.push_back(0);
      for (index_t l : lengths) cu.push_back(cu.back() + l), Tn += l;
    } else {
      B = N, Tn = lengths.front();  // batch rows: equal lengths
    }
    std::normal_distribution<double> normal;
    auto fill = [&](std::vector<T>& x, index_t n, double mean, double sd) {
      x.resize(std::size_t(n));
      for (auto& e : x) e = T(mean + sd * normal(rng));
    };
    fill(q, B * Tn * H * D, 0, 1);
    fill(k, B * Tn * H * D, 0, 1);
    fill(v, B * Tn * HV * D, 0, 1);
    eta.resize(std::size_t(B * Tn * HV));
    for (auto& e : eta) e = T(1.0 / (1.0 + std::exp(-normal(rng))) / D);
    fill(gam, HV * D, 1, 0.2);
    fill(bet, HV * D, 0, 0.2);
  }

  typename la::TTTLinear::inputs<T> inputs() const {
    typename la::TTTLinear::inputs<T> in{.q = la::view(q.data(), B, Tn, H, D), .k = la::view(k.data(), B, Tn, H, D),
                                         .v = la::view(v.data(), B, Tn, HV, D), .eta = la::view(eta.data(), B, Tn, HV),
                                         .ln_weight = la::view(gam.data(), HV, D), .ln_bias = la::view(bet.data(), HV, D)};
    in.mini_batch = MB;
    return in;
  }
};

/// `count` states: random weights and bias, a cache with a random unfinished mini-batch.
template <class A>
struct states {
  std::vector<A> w, b, c;
  index_t count;
  states(std::mt19937_64& rng, index_t n) : w(std::size_t(n * w_size)), b(std::size_t(n * b_size)), c(std::size_t(n * c_size)), count(n) {
    std::normal_distribution<double> normal;
    for (auto& e : w) e = A(0.3 * normal(rng));
    for (auto& e : b) e = A(0.3 * normal(rng));
    for (auto& e : c) e = A(0.05 * normal(rng));
    std::uniform_int_distribution<int> pos(0, int(MB) - 1);
    for (index_t s = 0; s < n; ++s)
      for (index_t hv = 0; hv < HV; ++hv) c[std::size_t(((s * HV + hv) * (D + 2) + D + 1) * D)] = A(pos(rng));
  }
  /// Entry s's part of each view, for comparisons.
  std::vector<A> entry(index_t s) const {
    std::vector<A> e(w.begin() + s * w_size, w.begin() + (s + 1) * w_size);
    e.insert(e.end(), b.begin() + s * b_size, b.begin() + (s + 1) * b_size);
    e.insert(e.end(), c.begin() + s * c_size, c.begin() + (s + 1) * c_size);
    return e;
  }
  /// Copies entry `from` of `src` into entry `to` (from < 0: zero weights, bias and cache).
  void set(index_t to, const states& src, index_t from) {
    auto copy = [&](std::vector<A>& dst, const std::vector<A>& s, index_t size) {
      for (index_t i = 0; i < size; ++i) dst[std::size_t(to * size + i)] = from < 0 ? A(0) : s[std::size_t(from * size + i)];
    };
    copy(w, src.w, w_size);
    copy(b, src.b, b_size);
    copy(c, src.c, c_size);
  }
};

/// Runs form f on p with the states of `st` updated in place: entry n for sequence n, or entry
/// slots[n] with a pool. Returns the output.
template <class T>
std::vector<T> run(form f, const problem<T>& p, states<la::state_t<T>>& st, const std::vector<std::int64_t>& slots,
                   int threads, bool check_finite = false) {
  using A = la::state_t<T>;
  const index_t n = st.count;
  auto in = p.inputs();
  in.initial_bias = in.final_bias = la::view(st.b.data(), n, HV, D);
  in.initial_cache = in.final_cache = la::view(st.c.data(), n, HV, D + 2, D);
  const auto w = la::view(st.w.data(), n, HV, D, D);
  la::options<A> opt;
  opt.threads = threads;
  opt.chunk_size = 2 * MB;
  opt.check_finite = check_finite;
  if (!slots.empty()) opt.state_indices = la::view(slots.data(), slots.size());
  if (!p.cu.empty()) opt.cu_seqlens = la::view(p.cu.data(), p.cu.size());
  std::vector<T> out(p.v.size(), std::numeric_limits<T>::quiet_NaN());
  const auto o = la::view(out.data(), p.B, p.Tn, HV, D);
  if (f == form::decode) {
    auto token = [](const auto& view, index_t t) {
      auto e = view.extents();
      e[1] = 1;
      return std::remove_cvref_t<decltype(view)>(view.data() + t * view.stride(1), e, view.strides());
    };
    for (index_t t = 0; t < p.Tn; ++t) {
      auto step = in;
      step.q = token(in.q, t), step.k = token(in.k, t), step.v = token(in.v, t), step.eta = token(in.eta, t);
      la::decode_step<la::TTTLinear>(step, token(o, t), w, opt);
    }
    return out;
  }
  opt.initial_state = opt.final_state = w;
  if (f == form::recurrent) la::recurrent_forward<la::TTTLinear>(in, o, opt);
  if (f == form::chunkwise) la::chunkwise_forward<la::TTTLinear>(in, o, opt);
  if (f == form::parallel) la::parallel_forward<la::TTTLinear>(in, o, opt);
  return out;
}

template <class T>
void check_pool(form f, bool packed, int threads) {
  using A = la::state_t<T>;
  std::mt19937_64 rng(40 + int(f) * 3 + packed);
  // Odd lengths, none a multiple of the mini-batch; a length-1 sequence when packed.
  const problem<T> p(rng, packed ? std::vector<index_t>{7, 1, 10} : std::vector<index_t>{11, 11, 11}, packed);
  const std::vector<std::int64_t> slots{3, -1, 0};
  const states<A> before(rng, P);
  // Plain: the states gathered per sequence (no slot: zero start), then the same call.
  states<A> plain(rng, p.N);
  for (index_t s = 0; s < p.N; ++s) plain.set(s, before, slots[std::size_t(s)]);
  const std::vector<T> want = run<T>(f, p, plain, {}, threads);
  states<A> pool = before;
  const std::vector<T> got = run<T>(f, p, pool, slots, threads);
  INFO(harness::name(f) << (packed ? ", packed" : ", batch rows") << ", threads " << threads);
  REQUIRE(std::none_of(want.begin(), want.end(), [](T x) { return std::isnan(double(x)); }));
  // The same path on the same values: bit for bit. A decode row without a slot starts from
  // zero at every step (nothing is written back), so only its first token matches the plain
  // run, which carries its state.
  std::vector<T> got_cmp = got, want_cmp = want;
  if (f == form::decode)
    for (index_t b = 0; b < p.B; ++b)
      if (slots[std::size_t(b)] < 0)
        for (index_t i = HV * D; i < p.Tn * HV * D; ++i) got_cmp[std::size_t(b * p.Tn * HV * D + i)] = want_cmp[std::size_t(b * p.Tn * HV * D + i)] = 0;
  CHECK(got_cmp == want_cmp);
  for (index_t s = 0; s < P; ++s) {
    const auto n = std::find(slots.begin(), slots.end(), s) - slots.begin();
    INFO("slot " << s);
    if (n == std::ptrdiff_t(slots.size())) CHECK(pool.entry(s) == before.entry(s));  // not named: untouched
    else CHECK(pool.entry(s) == plain.entry(index_t(n)));
  }
}

}  // namespace

TEMPLATE_TEST_CASE("state pool: TTT-Linear reads and writes weights, bias and cache at state_indices",
                   "[ttt][serving][pool]", float, double) {
  for (form f : harness::all_forms)
    for (bool packed : {false, true})
      if (!(f == form::decode && packed))  // decode takes one token per batch row
        for (int threads : {1, 3}) check_pool<TestType>(f, packed, threads);
}

TEST_CASE("state pool: TTT-Linear's bias and cache pools are checked before anything is written",
          "[ttt][serving][pool][validation]") {
  using T = double;
  std::mt19937_64 rng(7);
  const problem<T> p(rng, {6, 6, 6}, false);
  const std::vector<std::int64_t> slots{3, -1, 0};
  auto in = p.inputs();
  states<T> pool(rng, P);
  std::vector<T> out(p.v.size(), 0.5);
  const auto o = la::view(out.data(), p.B, p.Tn, HV, D);
  la::options<T> opt;
  opt.state_indices = la::view(slots.data(), slots.size());
  opt.initial_state = opt.final_state = la::view(pool.w.data(), P, HV, D, D);
  in.initial_cache = in.final_cache = la::view(pool.c.data(), P, HV, D + 2, D);
  const auto kept = pool;
  const auto kept_out = out;
  auto rejected = [&](const std::vector<std::string>& parts) {
    try {
      la::recurrent_forward<la::TTTLinear>(in, o, opt);
      FAIL("accepted");
    } catch (const la::error& e) {
      const std::string msg = e.what();
      for (const auto& part : parts) CHECK_THAT(msg, Catch::Contains(part));
    }
    CHECK(pool.w == kept.w);
    CHECK(pool.b == kept.b);
    CHECK(pool.c == kept.c);
    CHECK(out == kept_out);
  };
  // A bias pool of 3 slots cannot hold slot 3.
  in.initial_bias = in.final_bias = la::view(pool.b.data(), 3, HV, D);
  rejected({"'initial_bias'", "has 3 slots, expected at least 4"});
  // A bias pool of the wrong inner shape names the pool's shape.
  in.initial_bias = in.final_bias = la::view(pool.b.data(), P, HV - 1, D);
  rejected({"'initial_bias'", "[P, HV, D] (a pool of P slots: options.state_indices)"});
  in.initial_bias = in.final_bias = la::view(pool.b.data(), P, HV, D);
  // A cache position out of range in a slot the call reads.
  pool.c[std::size_t(((3 * HV + 1) * (D + 2) + D + 1) * D)] = T(MB);
  const auto bad_cache = pool;
  const auto expect_bad = [&] {
    try {
      la::recurrent_forward<la::TTTLinear>(in, o, opt);
      FAIL("accepted");
    } catch (const la::error& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains("'initial_cache' holds position 4") && Catch::Contains("[3, 1, D + 1, 0]"));
    }
    CHECK(pool.w == bad_cache.w);
    CHECK(pool.c == bad_cache.c);
  };
  expect_bad();
  // The same in a slot no sequence names is not read: accepted; NaN there passes check_finite.
  pool.c[std::size_t(((3 * HV + 1) * (D + 2) + D + 1) * D)] = T(1);
  pool.c[std::size_t(((4 * HV + 2) * (D + 2) + D + 1) * D)] = T(MB + 3);
  pool.b[std::size_t(2 * b_size + 5)] = std::numeric_limits<T>::quiet_NaN();
  opt.check_finite = true;
  CHECK_NOTHROW(la::recurrent_forward<la::TTTLinear>(in, o, opt));
  // ... while NaN in a slot that is read is reported.
  pool.b[std::size_t(0 * b_size + 1)] = std::numeric_limits<T>::quiet_NaN();
  CHECK_THROWS_WITH(la::recurrent_forward<la::TTTLinear>(in, o, opt),
                    Catch::Contains("'initial_bias'") && Catch::Contains("non-finite"));
}
