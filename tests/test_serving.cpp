// SPDX-License-Identifier: MIT
// Serving: state pools (options::state_indices), checkpoints (options::checkpoints),
// speculative decoding (verify_drafts / commit_drafts) and continuous batching, each against
// the plain forms on the same tokens. Pools hold random states, unused slots hold NaN-free
// random values that must stay bit-for-bit unchanged.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/cases.hpp"
#include "support/catch.hpp"
#include "support/harness.hpp"

using namespace harness;

namespace {

/// The library's input buffers of a problem (contiguous, or permuted with padding).
template <class Rule, class T>
struct token_buffers {
  buffer<T, 4> q, k, v;
  buffer<T, 3> g3, b3;
  buffer<T, 4> g4;

  token_buffers(const ref::problem& p, layout lay = layout::contiguous)
      : q({p.d.B, p.d.T, p.d.H, p.d.K}, lay, p.q), k({p.d.B, p.d.T, p.d.H, p.d.K}, lay, p.k),
        v({p.d.B, p.d.T, p.d.HV, p.d.V}, lay, p.v), g3({p.d.B, p.d.T, p.d.HV}, lay), b3({p.d.B, p.d.T, p.d.HV}, lay),
        g4({p.d.B, p.d.T, p.d.HV, p.d.K}, lay) {
    if (p.kind == ref::decay::scalar) g3.set(p.g);
    if (p.kind == ref::decay::vector) g4.set(p.g);
    if (!p.beta.empty()) b3.set(p.beta);
  }
  /// Tokens [t0, t0 + len) of every batch row.
  typename Rule::template inputs<T> inputs(index_t t0, index_t len) const {
    return make_inputs<Rule, T>(slice(q.view(), t0, len), slice(k.view(), t0, len), slice(v.view(), t0, len),
                                slice(g3.view(), t0, len), slice(g4.view(), t0, len), slice(b3.view(), t0, len));
  }
  typename Rule::template inputs<T> inputs() const { return inputs(0, q.view().extent(1)); }
  /// Tokens [t0, t0 + len) of batch row b alone (B = 1).
  typename Rule::template inputs<T> inputs(index_t b, index_t t0, index_t len) const {
    auto row = [&](auto v) {
      auto e = v.extents();
      e[0] = 1;
      return decltype(v)(v.data() + b * v.stride(0), e, v.strides());
    };
    const auto in = inputs(t0, len);
    return make_inputs<Rule, T>(row(la::tensor_view<const T, 4>(in.q)), row(la::tensor_view<const T, 4>(in.k)),
                                row(la::tensor_view<const T, 4>(in.v)), row(slice(g3.view(), t0, len)),
                                row(slice(g4.view(), t0, len)), row(slice(b3.view(), t0, len)));
  }

  template <class V>
  static V slice(const V& view, index_t t0, index_t len) {
    auto e = view.extents();
    e[1] = len;
    return V(view.data() + t0 * view.stride(1), e, view.strides());
  }
};

/// A pool of P random states `[P, HV, K, V]` (in the given layout).
template <class A>
buffer<A, 4> random_pool(std::mt19937_64& rng, index_t P, const ref::dims& d, layout lay = layout::contiguous) {
  std::normal_distribution<double> normal;
  std::vector<double> x(std::size_t(P) * d.HV * d.K * d.V);
  for (auto& e : x) e = 0.5 * normal(rng);
  return buffer<A, 4>({P, d.HV, d.K, d.V}, lay, x);
}

/// Slot s of a [P, HV, K, V] pool as a flat row-major vector.
inline std::vector<double> slot_of(const std::vector<double>& pool, const ref::dims& d, index_t s) {
  const std::size_t per = std::size_t(d.HV) * d.K * d.V;
  return {pool.begin() + std::ptrdiff_t(s * per), pool.begin() + std::ptrdiff_t((s + 1) * per)};
}

/// Entry (n, j) of a [N, J, HV, K, V] checkpoint buffer.
inline std::vector<double> entry_of(const std::vector<double>& cp, const ref::dims& d, index_t J, index_t n, index_t j) {
  const std::size_t per = std::size_t(d.HV) * d.K * d.V;
  const auto at = std::ptrdiff_t((n * J + j) * per);
  return {cp.begin() + at, cp.begin() + at + std::ptrdiff_t(per)};
}

/// The states of the given slots (zero for a negative slot), `[N, HV, K, V]`.
inline std::vector<double> gather(const std::vector<double>& pool, const ref::dims& d, const std::vector<std::int64_t>& slots) {
  std::vector<double> s;
  const std::size_t per = std::size_t(d.HV) * d.K * d.V;
  for (auto i : slots) {
    if (i < 0) s.insert(s.end(), per, 0.0);
    else {
      auto x = slot_of(pool, d, i);
      s.insert(s.end(), x.begin(), x.end());
    }
  }
  return s;
}

/// Bitwise equality of two float64 copies of library values (NaN == NaN).
inline bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

template <class T>
la::options<la::state_t<T>> base_options(index_t chunk, int threads) {
  la::options<la::state_t<T>> o;
  o.chunk_size = chunk;
  o.threads = threads;
  return o;
}

}  // namespace

// ---- pools --------------------------------------------------------------------------------

TEMPLATE_LIST_TEST_CASE("state pool: every form reads and writes slot state_indices[n], in place", "[serving][pool]",
                        all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  using A = la::state_t<T>;
  std::mt19937_64 rng(2024);
  for (const gates gm : {gates::mild, gates::strong})
    for (const layout lay : {layout::contiguous, layout::strided}) {
      const ref::dims d{.B = 3, .T = 7, .H = 2, .HV = 4, .K = 5, .V = 3};  // odd T, K != V, HV > H
      const ref::problem p = make_problem(rng, d, spec_of<Rule>(), gm, false);
      const token_buffers<Rule, T> tb(p, lay);
      const index_t P = 6;
      const std::vector<std::int64_t> slots{4, -1, 1};
      for (const form f : all_forms) {
        for (const int threads : {1, 2}) {
          INFO(name(f) << " gates " << int(gm) << " layout " << int(lay) << " threads " << threads);
          buffer<A, 4> pool = random_pool<A>(rng, P, d, lay);
          const std::vector<double> before = pool.get();
          // Plain run: the gathered states, in place in an [N, HV, K, V] buffer.
          buffer<A, 4> plain_state({d.B, d.HV, d.K, d.V}, lay, gather(before, d, slots));
          buffer<T, 4> out_plain({d.B, d.T, d.HV, d.V}, lay), out_pool({d.B, d.T, d.HV, d.V}, lay);
          auto opt = base_options<T>(3, threads);
          auto pooled = opt;
          pooled.state_indices = la::view(slots.data(), slots.size());
          if (f == form::decode) {
            // Steps of 1, 2 and 4 tokens; the sequence without a slot (-1) starts from zero at
            // every step (nothing is written back), so it only sees the last step's tokens.
            for (index_t t = 0, n = 1; t < d.T; t += n, n *= 2) {
              n = std::min(n, d.T - t);
              la::decode_step<Rule>(tb.inputs(t, n), token_buffers<Rule, T>::slice(out_plain.view(), t, n), plain_state.view(), opt);
              la::decode_step<Rule>(tb.inputs(t, n), token_buffers<Rule, T>::slice(out_pool.view(), t, n), pool.view(), pooled);
              for (index_t hv = 0; hv < d.HV; ++hv)  // plain: reset sequence 1 to zero
                for (index_t i = 0; i < d.K; ++i)
                  for (index_t j = 0; j < d.V; ++j) plain_state.view()(1, hv, i, j) = A(0);
            }
          } else {
            opt.initial_state = plain_state.view();
            opt.final_state = plain_state.view();
            pooled.initial_state = pool.view();
            pooled.final_state = pool.view();
            auto call = [&](const auto& o, const auto& out) {
              if (f == form::recurrent) la::recurrent_forward<Rule>(tb.inputs(), out, o);
              if (f == form::chunkwise) la::chunkwise_forward<Rule>(tb.inputs(), out, o);
              if (f == form::parallel) la::parallel_forward<Rule>(tb.inputs(), out, o);
            };
            call(opt, out_plain.view());
            call(pooled, out_pool.view());
          }
          CHECK(rel_err(out_pool.get(), out_plain.get()) <= tolerance<T>());
          const std::vector<double> after = pool.get(), plain = plain_state.get();
          for (index_t s = 0; s < P; ++s) {
            const auto n = std::find(slots.begin(), slots.end(), s) - slots.begin();
            if (n == std::ptrdiff_t(slots.size())) {
              CHECK(same_bits(slot_of(after, d, s), slot_of(before, d, s)));  // unused: untouched
            } else {
              CHECK(rel_err(slot_of(after, d, s), slot_of(plain, d, n)) <= tolerance<T>());
            }
          }
          CHECK(pool.padding_untouched());
          CHECK(out_pool.padding_untouched());
          if (f != form::decode) {  // against the float64 reference: slot -1 from zero
            ref::problem pr = p;
            pr.s0 = gather(before, d, slots);
            CHECK(rel_err(out_pool.get(), ref::run(pr).o) <= 50 * tolerance<T>());
          }
        }
      }
    }
}

TEMPLATE_LIST_TEST_CASE("state pool: chunkwise with a pool gives the bits of contiguous states", "[serving][pool]",
                        householder_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  using A = la::state_t<T>;
  std::mt19937_64 rng(7);
  const ref::dims d{.B = 4, .T = 11, .H = 1, .HV = 2, .K = 6, .V = 5};
  const ref::problem p = make_problem(rng, d, spec_of<Rule>(), gates::mild, false);
  const token_buffers<Rule, T> tb(p);
  buffer<A, 4> pool = random_pool<A>(rng, 9, d);
  const std::vector<std::int64_t> slots{8, 0, 5, 2};
  buffer<A, 4> s0({d.B, d.HV, d.K, d.V}, layout::contiguous, gather(pool.get(), d, slots)),
      s1({d.B, d.HV, d.K, d.V}, layout::contiguous);
  buffer<T, 4> o1({d.B, d.T, d.HV, d.V}, layout::contiguous), o2({d.B, d.T, d.HV, d.V}, layout::contiguous);
  for (const int threads : {1, 2}) {
    auto opt = base_options<T>(4, threads);
    opt.initial_state = s0.view();
    opt.final_state = s1.view();
    la::chunkwise_forward<Rule>(tb.inputs(), o1.view(), opt);
    auto pooled = base_options<T>(4, threads);
    buffer<A, 4> pool_copy({9, d.HV, d.K, d.V}, layout::contiguous, pool.get());
    pooled.state_indices = la::view(slots.data(), slots.size());
    pooled.initial_state = pool_copy.view();
    pooled.final_state = pool_copy.view();
    la::chunkwise_forward<Rule>(tb.inputs(), o2.view(), pooled);
    CHECK(same_bits(o1.get(), o2.get()));
    CHECK(same_bits(gather(pool_copy.get(), d, slots), s1.get()));
  }
}

// ---- checkpoints --------------------------------------------------------------------------

TEMPLATE_LIST_TEST_CASE("checkpoints: resuming from any checkpoint continues bit for bit", "[serving][checkpoints]",
                        all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  using A = la::state_t<T>;
  std::mt19937_64 rng(99);
  for (const gates gm : {gates::mild, gates::strong}) {
    const ref::dims d{.B = 2, .T = 19, .H = 1, .HV = 2, .K = 5, .V = 4};
    const ref::problem p = make_problem(rng, d, spec_of<Rule>(), gm, true);
    const token_buffers<Rule, T> tb(p);
    buffer<A, 4> s0({d.B, d.HV, d.K, d.V}, layout::contiguous, p.s0);
    for (const form f : {form::chunkwise, form::recurrent}) {
      for (const int threads : {1, 2}) {
        const index_t C = 4, every = f == form::chunkwise ? 8 : 3, J = (d.T + every - 1) / every;
        INFO(name(f) << " threads " << threads << " gates " << int(gm));
        buffer<T, 4> out({d.B, d.T, d.HV, d.V}, layout::contiguous);
        buffer<A, 4> fin({d.B, d.HV, d.K, d.V}, layout::contiguous);
        buffer<A, 5> cp({d.B, J, d.HV, d.K, d.V}, layout::strided);
        auto opt = base_options<T>(C, threads);
        opt.initial_state = s0.view();
        opt.final_state = fin.view();
        opt.checkpoint_every = every;
        opt.checkpoints = cp.view();
        auto run = [&](const auto& in, const auto& o, const auto& opts) {
          if (f == form::chunkwise) la::chunkwise_forward<Rule>(in, o, opts);
          else la::recurrent_forward<Rule>(in, o, opts);
        };
        run(tb.inputs(), out.view(), opt);
        CHECK(cp.padding_untouched());
        const std::vector<double> full_out = out.get(), full_state = fin.get(), cps = cp.get();
        for (index_t n = 0; n < d.B; ++n)  // the last entry is the final state
          CHECK(same_bits(entry_of(cps, d, J, n, J - 1), slot_of(full_state, d, n)));
        for (index_t j = 0; j + 1 < J; ++j) {
          // Resume after (j + 1) * every tokens from checkpoint j (a strided view into cp).
          const index_t t0 = (j + 1) * every, len = d.T - t0;
          const la::tensor_view<const A, 4> from(&cp.view()(0, j, 0, 0, 0), {d.B, d.HV, d.K, d.V},
                                                 {cp.view().stride(0), cp.view().stride(2), cp.view().stride(3),
                                                  cp.view().stride(4)});
          buffer<T, 4> tail({d.B, len, d.HV, d.V}, layout::contiguous);
          buffer<A, 4> fin2({d.B, d.HV, d.K, d.V}, layout::contiguous);
          auto resume = base_options<T>(C, threads);
          resume.initial_state = from;
          resume.final_state = fin2.view();
          run(tb.inputs(t0, len), tail.view(), resume);
          CHECK(same_bits(tail.get(), rows(full_out, d, int(t0), d.T)));
          CHECK(same_bits(fin2.get(), full_state));
        }
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("checkpoints: packed sequences fill ceil(len / n) entries and leave the rest untouched",
                        "[serving][checkpoints]", householder_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  using A = la::state_t<T>;
  std::mt19937_64 rng(5);
  const std::vector<std::int64_t> cu{0, 5, 17, 20, 20};  // lengths 5, 12, 3, 0
  const ref::dims d{.B = 1, .T = 20, .H = 2, .HV = 4, .K = 3, .V = 5};
  const ref::problem p = make_problem(rng, d, spec_of<Rule>(), gates::mild, true, cu);
  const token_buffers<Rule, T> tb(p);
  const index_t N = 4, C = 2, every = 8, J = 2;  // J = ceil(12 / 8)
  buffer<A, 4> s0({N, d.HV, d.K, d.V}, layout::contiguous, p.s0);
  for (const int threads : {1, 2}) {
    buffer<T, 4> out({1, d.T, d.HV, d.V}, layout::contiguous);
    buffer<A, 5> cp({N, J, d.HV, d.K, d.V}, layout::contiguous);
    auto opt = base_options<T>(C, threads);
    opt.cu_seqlens = la::view(cu.data(), cu.size());
    opt.initial_state = s0.view();
    opt.checkpoint_every = every;
    opt.checkpoints = cp.view();
    la::chunkwise_forward<Rule>(tb.inputs(), out.view(), opt);
    const std::vector<double> cps = cp.get();
    for (index_t n = 0; n < N; ++n) {
      const index_t len = cu[std::size_t(n) + 1] - cu[std::size_t(n)], used = (len + every - 1) / every;
      for (index_t j = 0; j < J; ++j) {
        const std::vector<double> e = entry_of(cps, d, J, n, j);
        INFO("sequence " << n << " entry " << j << " threads " << threads);
        if (j >= used) {
          CHECK(std::all_of(e.begin(), e.end(), [](double x) { return std::isnan(x); }));  // untouched
          continue;
        }
        // A separate run over the sequence's first min((j + 1) every, len) tokens, same chunks.
        const index_t upto = std::min((j + 1) * every, len);
        buffer<T, 4> o({1, upto, d.HV, d.V}, layout::contiguous);
        buffer<A, 4> st({1, d.HV, d.K, d.V}, layout::contiguous);
        buffer<A, 4> start({1, d.HV, d.K, d.V}, layout::contiguous, slot_of(p.s0, d, n));
        auto single = base_options<T>(C, threads);
        single.initial_state = start.view();
        single.final_state = st.view();
        la::chunkwise_forward<Rule>(tb.inputs(cu[std::size_t(n)], upto), o.view(), single);
        CHECK(same_bits(e, st.get()));
      }
    }
  }
}

// ---- speculative decoding -----------------------------------------------------------------

TEMPLATE_LIST_TEST_CASE("speculative decoding: commit rolls back to every accepted count", "[serving][speculative]",
                        all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  using A = la::state_t<T>;
  std::mt19937_64 rng(31);
  for (const bool packed : {false, true}) {
    // Dense: 3 sequences x 5 drafts. Packed: 5, 1 and 3 drafts (each its own count).
    const std::vector<std::int64_t> cu = packed ? std::vector<std::int64_t>{0, 5, 6, 9} : std::vector<std::int64_t>{};
    const ref::dims d{.B = packed ? 1 : 3, .T = packed ? 9 : 5, .H = 1, .HV = 2, .K = 4, .V = 3};
    const ref::problem p = make_problem(rng, d, spec_of<Rule>(), gates::strong, false, cu);
    const token_buffers<Rule, T> tb(p);
    const index_t N = 3, L = 5, P = 4;
    const std::vector<std::int64_t> slots{2, -1, 0};
    auto length = [&](index_t n) { return packed ? cu[std::size_t(n) + 1] - cu[std::size_t(n)] : d.T; };
    auto start = [&](index_t n) { return packed ? cu[std::size_t(n)] : 0; };
    buffer<A, 4> pool = random_pool<A>(rng, P, d);
    const std::vector<double> before = pool.get();
    for (index_t a = 0; a <= L; ++a) {
      INFO("packed " << packed << " accepted " << a);
      buffer<A, 4> work({P, d.HV, d.K, d.V}, layout::contiguous, before);
      buffer<T, 4> out({d.B, d.T, d.HV, d.V}, layout::contiguous);
      buffer<A, 5> drafts({N, L, d.HV, d.K, d.V}, layout::contiguous);
      auto opt = base_options<T>(64, 2);
      opt.state_indices = la::view(slots.data(), slots.size());
      if (packed) opt.cu_seqlens = la::view(cu.data(), cu.size());
      la::verify_drafts<Rule>(tb.inputs(), out.view(), work.view(), drafts.view(), opt);
      CHECK(same_bits(work.get(), before));  // verify writes no slot
      std::vector<std::int32_t> accepted(N);
      for (index_t n = 0; n < N; ++n) accepted[std::size_t(n)] = std::int32_t(std::min(a, length(n)));
      la::commit_drafts(work.view(), drafts.view(), la::view(accepted.data(), N), opt);
      const std::vector<double> after = work.get();
      CHECK(same_bits(slot_of(after, d, 1), slot_of(before, d, 1)));  // unused slots
      CHECK(same_bits(slot_of(after, d, 3), slot_of(before, d, 3)));
      for (index_t n = 0; n < N; ++n) {
        const index_t acc = accepted[std::size_t(n)];
        // The plain recurrence over the accepted tokens from the slot's state.
        const index_t b = packed ? 0 : n;
        buffer<A, 4> s0({1, d.HV, d.K, d.V}, layout::contiguous, gather(before, d, {slots[std::size_t(n)]}));
        buffer<A, 4> s1({1, d.HV, d.K, d.V}, layout::contiguous, gather(before, d, {slots[std::size_t(n)]}));
        buffer<T, 4> o({1, std::max<index_t>(acc, 1), d.HV, d.V}, layout::contiguous);
        if (acc > 0) {
          auto one = tb.inputs(b, start(n), acc);
          auto plain = base_options<T>(64, 1);
          if (slots[std::size_t(n)] >= 0) plain.initial_state = s0.view();
          plain.final_state = s1.view();
          la::recurrent_forward<Rule>(one, o.view(), plain);
          // The verify outputs of the accepted tokens are the plain ones.
          const std::vector<double> got = out.get(), want = o.get();
          const std::size_t w = std::size_t(d.HV) * d.V;
          const std::size_t at = (std::size_t(b) * d.T + std::size_t(start(n))) * w;
          CHECK(same_bits(std::vector<double>(got.begin() + std::ptrdiff_t(at), got.begin() + std::ptrdiff_t(at + acc * w)), want));
        }
        if (slots[std::size_t(n)] >= 0)
          CHECK(same_bits(slot_of(after, d, slots[std::size_t(n)]), s1.get()));
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("speculative decoding with a compact record: outputs and every rollback match fp64",
                        "[serving][speculative]", all_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  using A = la::state_t<T>;
  std::mt19937_64 rng(37);
  for (const bool packed : {false, true})
    for (const gates gm : {gates::mild, gates::strong}) {
      // Dense: 3 sequences x 6 drafts. Packed: 6, 1 and 4 drafts. K != V, two value heads per q/k head.
      const std::vector<std::int64_t> cu = packed ? std::vector<std::int64_t>{0, 6, 7, 11} : std::vector<std::int64_t>{};
      const ref::dims d{.B = packed ? 1 : 3, .T = packed ? 11 : 6, .H = 1, .HV = 2, .K = 5, .V = 3};
      const ref::problem p = make_problem(rng, d, spec_of<Rule>(), gm, false, cu);
      const token_buffers<Rule, T> tb(p);
      const index_t N = 3, L = 6, P = 4, G = Rule::decay == la::decay_kind::vector ? d.K : 1;
      const std::vector<std::int64_t> slots{2, -1, 0};
      auto length = [&](index_t n) { return packed ? cu[std::size_t(n) + 1] - cu[std::size_t(n)] : d.T; };
      buffer<A, 4> pool = random_pool<A>(rng, P, d);
      const std::vector<double> before = pool.get();
      // The fp64 reference of the whole draft from each sequence's slot state.
      ref::problem whole = p;
      whole.s0 = gather(before, d, slots);
      const ref::result want = ref::run(whole);
      // Verify on one and on three threads: the same bits; the pool unchanged.
      auto opt = base_options<T>(64, 1);
      opt.state_indices = la::view(slots.data(), slots.size());
      if (packed) opt.cu_seqlens = la::view(cu.data(), cu.size());
      buffer<T, 4> out({d.B, d.T, d.HV, d.V}, layout::strided);
      buffer<A, 4> keys({N, L, d.HV, d.K}, layout::strided), updates({N, L, d.HV, d.V}, layout::contiguous),
          decay({N, L, d.HV, G}, layout::contiguous);
      const la::draft_record<A> rec{keys.view(), updates.view(), decay.view()};
      la::verify_drafts<Rule>(tb.inputs(), out.view(), pool.view(), rec, opt);
      INFO("packed " << packed << " gates " << int(gm));
      CHECK(same_bits(pool.get(), before));
      CHECK(rel_err(out.get(), want.o) < tolerance<T>());
      CHECK(out.padding_untouched());
      const std::vector<double> k1 = keys.get(), u1 = updates.get(), g1 = decay.get(), o1 = out.get();
      opt.threads = 3;
      la::verify_drafts<Rule>(tb.inputs(), out.view(), pool.view(), rec, opt);
      CHECK((same_bits(out.get(), o1) && same_bits(keys.get(), k1) && same_bits(updates.get(), u1) && same_bits(decay.get(), g1)));
      for (index_t a = 0; a <= L; ++a) {
        INFO("accepted " << a);
        std::vector<std::int64_t> accepted(N);
        for (index_t n = 0; n < N; ++n) accepted[std::size_t(n)] = std::min(a, length(n));
        buffer<A, 4> work({P, d.HV, d.K, d.V}, layout::strided, before), work3({P, d.HV, d.K, d.V}, layout::strided, before);
        la::commit_drafts(work.view(), rec, la::view(accepted.data(), N), opt);
        opt.threads = 1;
        la::commit_drafts(work3.view(), rec, la::view(accepted.data(), N), opt);
        opt.threads = 3;
        const std::vector<double> after = work.get();
        CHECK(same_bits(after, work3.get()));
        CHECK(work.padding_untouched());
        CHECK(same_bits(slot_of(after, d, 1), slot_of(before, d, 1)));  // unused slots
        CHECK(same_bits(slot_of(after, d, 3), slot_of(before, d, 3)));
        for (index_t n = 0; n < N; ++n) {
          const std::int64_t slot = slots[std::size_t(n)];
          if (slot < 0) continue;
          const index_t acc = accepted[std::size_t(n)];
          if (acc == 0) {
            CHECK(same_bits(slot_of(after, d, slot), slot_of(before, d, slot)));
            continue;
          }
          // The fp64 recurrence over the accepted tokens of sequence n alone, from its slot.
          const ref::problem one = prefix_of(p, int(n), int(acc), slot_of(before, d, slot));
          CHECK(rel_err(slot_of(after, d, slot), ref::run(one).s) < tolerance<T>());
        }
      }
    }
}

// ---- continuous batching ------------------------------------------------------------------

TEMPLATE_LIST_TEST_CASE("continuous batching: prefill and decode through a pool replay the full sequences",
                        "[serving][batching]", householder_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  using A = la::state_t<T>;
  std::mt19937_64 rng(77);
  // Three requests of 9, 6 and 8 tokens; request r's prompt is its first prompt[r] tokens.
  const ref::dims d{.B = 1, .T = 23, .H = 2, .HV = 4, .K = 4, .V = 6};
  const std::vector<std::int64_t> cu_all{0, 9, 15, 23};
  const ref::problem p = make_problem(rng, d, spec_of<Rule>(), gates::mild, false, cu_all);
  const token_buffers<Rule, T> tb(p);
  const ref::result want = ref::run(p);  // full-sequence runs
  const std::vector<index_t> prompt{5, 1, 3}, slot{3, 0, 5};
  const index_t P = 6;
  buffer<A, 4> pool = random_pool<A>(rng, P, d);
  buffer<T, 4> out({1, d.T, d.HV, d.V}, layout::contiguous);
  // Step 0: one mixed call: request 0 prefills 5 tokens, request 1 "decodes" its first token,
  // request 2 prefills 3; every request starts from zero (negative slot on read would be the
  // same; here: the slots are overwritten through final_state only).
  {
    std::vector<std::int64_t> cu{0};
    for (index_t r = 0; r < 3; ++r) cu.push_back(cu.back() + prompt[std::size_t(r)]);
    // Packed copies of the prompt tokens.
    ref::problem pp = p;
    pp.d.T = int(cu.back());
    pp.cu = cu;
    auto pick = [&](const std::vector<double>& x, std::size_t w) {
      std::vector<double> y;
      for (index_t r = 0; r < 3; ++r)
        y.insert(y.end(), x.begin() + std::ptrdiff_t(cu_all[std::size_t(r)] * w),
                 x.begin() + std::ptrdiff_t((cu_all[std::size_t(r)] + prompt[std::size_t(r)]) * w));
      return y;
    };
    pp.q = pick(p.q, std::size_t(d.H) * d.K);
    pp.k = pick(p.k, std::size_t(d.H) * d.K);
    pp.v = pick(p.v, std::size_t(d.HV) * d.V);
    const std::size_t gates_per_token = std::size_t(d.HV) * (p.kind == ref::decay::vector ? d.K : 1);
    if (!p.g.empty()) pp.g = pick(p.g, gates_per_token);
    if (!p.beta.empty()) pp.beta = pick(p.beta, std::size_t(d.HV));
    const token_buffers<Rule, T> pb(pp);
    buffer<T, 4> po({1, pp.d.T, d.HV, d.V}, layout::contiguous);
    std::vector<std::int64_t> slots(slot.begin(), slot.end());
    auto opt = base_options<T>(2, 2);
    opt.cu_seqlens = la::view(cu.data(), cu.size());
    opt.state_indices = la::view(slots.data(), slots.size());
    opt.final_state = pool.view();  // no initial_state: new requests start from zero
    la::chunkwise_forward<Rule>(pb.inputs(), po.view(), opt);
    const std::vector<double> got = po.get();
    const std::size_t w = std::size_t(d.HV) * d.V;
    for (index_t r = 0; r < 3; ++r)
      for (index_t t = 0; t < prompt[std::size_t(r)]; ++t)
        for (std::size_t j = 0; j < w; ++j) {
          const double g = got[std::size_t(cu[std::size_t(r)] + t) * w + j];
          const double e = want.o[std::size_t(cu_all[std::size_t(r)] + t) * w + j];
          CHECK(std::abs(g - e) <= 50 * tolerance<T>() * (1 + std::abs(e)));
        }
  }
  // Then decode steps: each step takes every request that still has tokens, in a varying
  // order of slots, through decode_step on the pool.
  std::vector<index_t> pos = prompt;
  double worst = 0;
  for (int step = 0; step < 10; ++step) {
    std::vector<index_t> active;
    for (index_t r = 0; r < 3; ++r)
      if (pos[std::size_t(r)] < cu_all[std::size_t(r) + 1] - cu_all[std::size_t(r)]) active.push_back(r);
    if (active.empty()) break;
    if (step % 2) std::reverse(active.begin(), active.end());
    const index_t Bn = index_t(active.size());
    // Gather the active requests' next tokens into a [Bn, 1, ...] batch (plus one padding row).
    ref::problem sp = p;
    sp.cu.clear();
    sp.d.B = int(Bn) + 1;
    sp.d.T = 1;
    auto take = [&](const std::vector<double>& x, std::size_t w) {
      std::vector<double> y;
      for (index_t r : active) {
        const auto t = std::size_t(cu_all[std::size_t(r)] + pos[std::size_t(r)]);
        y.insert(y.end(), x.begin() + std::ptrdiff_t(t * w), x.begin() + std::ptrdiff_t((t + 1) * w));
      }
      y.insert(y.end(), x.begin(), x.begin() + std::ptrdiff_t(w));  // padding row: token 0
      return y;
    };
    sp.q = take(p.q, std::size_t(d.H) * d.K);
    sp.k = take(p.k, std::size_t(d.H) * d.K);
    sp.v = take(p.v, std::size_t(d.HV) * d.V);
    if (!p.g.empty()) sp.g = take(p.g, std::size_t(d.HV) * (p.kind == ref::decay::vector ? d.K : 1));
    if (!p.beta.empty()) sp.beta = take(p.beta, std::size_t(d.HV));
    const token_buffers<Rule, T> sb(sp);
    buffer<T, 4> so({sp.d.B, 1, d.HV, d.V}, layout::contiguous);
    std::vector<std::int64_t> slots;
    for (index_t r : active) slots.push_back(slot[std::size_t(r)]);
    slots.push_back(-1);  // padding: from zero, written nowhere
    auto opt = base_options<T>(64, 2);
    opt.state_indices = la::view(slots.data(), slots.size());
    const std::vector<double> pool_before = pool.get();
    la::decode_step<Rule>(sb.inputs(), so.view(), pool.view(), opt);
    const std::vector<double> got = so.get();
    const std::size_t w = std::size_t(d.HV) * d.V;
    for (index_t i = 0; i < Bn; ++i) {
      const index_t r = active[std::size_t(i)];
      const auto t = std::size_t(cu_all[std::size_t(r)] + pos[std::size_t(r)]);
      std::vector<double> g(got.begin() + std::ptrdiff_t(i * index_t(w)), got.begin() + std::ptrdiff_t((i + 1) * index_t(w)));
      std::vector<double> e(want.o.begin() + std::ptrdiff_t(t * w), want.o.begin() + std::ptrdiff_t((t + 1) * w));
      worst = std::max(worst, rel_err(g, e));
      ++pos[std::size_t(r)];
    }
    // Slots of finished or idle requests stay as they were.
    for (index_t s : {index_t(1), index_t(2), index_t(4)})
      CHECK(same_bits(slot_of(pool.get(), d, s), slot_of(pool_before, d, s)));
  }
  CHECK(worst <= 50 * tolerance<T>());
  // The final states equal the full-sequence states.
  for (index_t r = 0; r < 3; ++r)
    CHECK(rel_err(slot_of(pool.get(), d, slot[std::size_t(r)]), slot_of(want.s, d, r)) <= 50 * tolerance<T>());
}

// ---- rejected calls -----------------------------------------------------------------------

namespace {
/// Runs f, expects linattn::error whose message contains every part.
template <class F>
void expect_rejected(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL("no linattn::error thrown");
  } catch (const la::error& e) {
    const std::string m = e.what();
    for (const auto& s : parts) {
      INFO(m);
      CHECK(m.find(s) != std::string::npos);
    }
  }
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("serving: bad indices, checkpoints and counts are rejected with nothing written",
                        "[serving][validation]", householder_cases) {
  using Rule = typename TestType::rule;
  using T = typename TestType::scalar;
  using A = la::state_t<T>;
  std::mt19937_64 rng(3);
  const ref::dims d{.B = 3, .T = 5, .H = 1, .HV = 2, .K = 3, .V = 4};
  const ref::problem p = make_problem(rng, d, spec_of<Rule>(), gates::mild, false);
  const token_buffers<Rule, T> tb(p);
  buffer<A, 4> pool = random_pool<A>(rng, 4, d);
  const std::vector<double> before = pool.get();
  buffer<T, 4> out({d.B, d.T, d.HV, d.V}, layout::contiguous);
  const char* fn = Rule::name;
  auto pooled = [&](const std::vector<std::int64_t>& idx) {
    auto o = base_options<T>(2, 2);
    o.state_indices = la::view(idx.data(), idx.size());
    o.initial_state = pool.view();
    o.final_state = pool.view();
    return o;
  };
  auto untouched = [&] {
    CHECK(same_bits(pool.get(), before));
    const auto o = out.get();
    CHECK(std::all_of(o.begin(), o.end(), [](double x) { return std::isnan(x); }));
  };
  const std::vector<std::int64_t> out_of_range{0, 4, 1}, duplicate{2, -1, 2}, short_list{0, 1};
  expect_rejected([&] { la::chunkwise_forward<Rule>(tb.inputs(), out.view(), pooled(out_of_range)); },
                  {fn, "'options.state_indices'", "entry 1 = 4", "0..3"});
  untouched();
  expect_rejected([&] { la::recurrent_forward<Rule>(tb.inputs(), out.view(), pooled(duplicate)); },
                  {"'options.state_indices'", "entries 0 and 2 both = 2", "distinct"});
  untouched();
  expect_rejected([&] { la::parallel_forward<Rule>(tb.inputs(), out.view(), pooled(short_list)); },
                  {"'options.state_indices'", "2 entries, expected N = 3"});
  untouched();
  {
    auto o = base_options<T>(2, 1);
    o.state_indices = la::view(duplicate.data(), duplicate.size());
    expect_rejected([&] { la::decode_step<Rule>(tb.inputs(0, 1), token_buffers<Rule, T>::slice(out.view(), 0, 1), pool.view(), o); },
                    {"decode_step", "'options.state_indices'", "both = 2"});
    untouched();
    o.state_indices = la::view(out_of_range.data(), out_of_range.size());
    expect_rejected([&] { la::decode_step<Rule>(tb.inputs(0, 1), token_buffers<Rule, T>::slice(out.view(), 0, 1), pool.view(), o); },
                    {"'options.state_indices'", "entry 1 = 4", "of 'state'"});
    untouched();
    const std::vector<std::int32_t> only{0, 1, 2};
    o.state_indices = la::view(only.data(), only.size());  // no state view at all
    expect_rejected([&] { la::recurrent_forward<Rule>(tb.inputs(), out.view(), o); }, {"no state view"});
    untouched();
  }
  // Checkpoints: the interval, the shape, the form.
  buffer<A, 5> cp({d.B, 3, d.HV, d.K, d.V}, layout::contiguous);
  const std::vector<std::int64_t> fine{3, -1, 0};
  auto with_cp = [&](index_t every) {
    auto o = pooled(fine);
    o.checkpoint_every = every;
    o.checkpoints = cp.view();
    return o;
  };
  auto cp_untouched = [&] {
    const auto c = cp.get();
    CHECK(std::all_of(c.begin(), c.end(), [](double x) { return std::isnan(x); }));
  };
  expect_rejected([&] { la::chunkwise_forward<Rule>(tb.inputs(), out.view(), with_cp(3)); },
                  {"'options.checkpoint_every'", "is 3", "multiple of options.chunk_size = 2"});
  expect_rejected([&] { la::chunkwise_forward<Rule>(tb.inputs(), out.view(), with_cp(4)); },
                  {"'options.checkpoints'", "expected [N, ceil(T / checkpoint_every), HV, K, V] = [3, 2, 2, 3, 4]"});
  expect_rejected([&] { la::parallel_forward<Rule>(tb.inputs(), out.view(), with_cp(2)); },
                  {"'options.checkpoints'", "parallel_forward"});
  expect_rejected([&] { la::recurrent_forward<Rule>(tb.inputs(), out.view(), with_cp(-1)); },
                  {"'options.checkpoint_every'", "is -1"});
  {
    auto o = with_cp(2);
    o.checkpoint_every = 0;
    expect_rejected([&] { la::recurrent_forward<Rule>(tb.inputs(), out.view(), o); }, {"checkpoint_every = 0"});
    auto overlap = with_cp(2);
    overlap.checkpoints = la::tensor_view<A, 5>(pool.data(), {d.B, 3, d.HV, d.K, d.V}, {0, 0, 0, 0, 0});
    expect_rejected([&] { la::recurrent_forward<Rule>(tb.inputs(), out.view(), overlap); }, {"'options.checkpoints'"});
  }
  untouched();
  cp_untouched();
  // The in-place pool is fine; a pool that partly overlaps another pool is not.
  {
    const std::vector<std::int64_t> low{2, -1, 0};
    auto o = pooled(low);
    o.final_state = la::tensor_view<A, 4>(pool.data() + 1, {3, d.HV, d.K, d.V}, pool.view().strides());
    expect_rejected([&] { la::recurrent_forward<Rule>(tb.inputs(), out.view(), o); }, {"'options.final_state'", "overlaps"});
    untouched();
  }
  // commit_drafts: counts, indices, shapes.
  buffer<A, 5> drafts({d.B, d.T, d.HV, d.K, d.V}, layout::contiguous, std::vector<double>(std::size_t(d.B) * d.T * d.HV * d.K * d.V, 0.25));
  const std::vector<std::int64_t> too_many{1, 6, 0}, negative{1, -1, 0}, ok{1, 2, 3};
  auto commit = [&](const std::vector<std::int64_t>& acc, const std::vector<std::int64_t>& idx) {
    la::options<A> o;
    o.state_indices = la::view(idx.data(), idx.size());
    la::commit_drafts(pool.view(), drafts.view(), la::view(acc.data(), acc.size()), o);
  };
  expect_rejected([&] { commit(too_many, fine); }, {"commit_drafts", "'num_accepted'", "entry 1 = 6", "0..5"});
  expect_rejected([&] { commit(negative, fine); }, {"'num_accepted'", "entry 1 = -1"});
  expect_rejected([&] { commit(ok, duplicate); }, {"'options.state_indices'", "both = 2"});
  expect_rejected([&] { commit(ok, out_of_range); }, {"'options.state_indices'", "entry 1 = 4"});
  expect_rejected([&] { commit(ok, short_list); }, {"'options.state_indices'", "expected N = 3"});
  untouched();
  // verify_drafts and commit_drafts with a compact record: shapes, widths, overlaps.
  {
    const index_t G = Rule::decay == la::decay_kind::vector ? d.K : 1;
    buffer<A, 4> keys({d.B, d.T, d.HV, d.K}, layout::contiguous), updates({d.B, d.T, d.HV, d.V}, layout::contiguous),
        decay({d.B, d.T, d.HV, G}, layout::contiguous), wide({d.B, d.T, d.HV, d.K + 1}, layout::contiguous);
    const la::draft_record<A> rec{keys.view(), updates.view(), decay.view()};
    auto records_untouched = [&] {
      for (const auto* b : {&keys, &updates, &decay}) {
        const auto x = b->get();
        CHECK(std::all_of(x.begin(), x.end(), [](double e) { return std::isnan(e); }));
      }
    };
    auto o = base_options<T>(2, 2);
    o.state_indices = la::view(fine.data(), fine.size());
    auto verify = [&](const la::draft_record<A>& r, const la::options<A>& op) {
      la::verify_drafts<Rule>(tb.inputs(), out.view(), pool.view(), r, op);
    };
    expect_rejected([&] { verify({keys.view(), updates.view(), {}}, o); },
                    {"verify_drafts<", "'record.log_decay'", "is missing"});
    expect_rejected([&] { verify({updates.view(), updates.view(), decay.view()}, o); },
                    {"'record.keys'", "expected [N, L, HV, K]"});
    expect_rejected([&] { verify({keys.view(), updates.view(), wide.view()}, o); }, {"'record.log_decay'", "expected [N, L, HV, G]"});
    expect_rejected([&] { verify({keys.view(), keys.view(), decay.view()}, o); }, {"'record.updates'"});
    const la::tensor_view<A, 4> into_pool(pool.data(), {d.B, d.T, d.HV, d.V}, {0, 0, 0, 1});
    expect_rejected([&] { verify({keys.view(), into_pool, decay.view()}, o); }, {"'record.updates'"});
    auto with_cp = o;
    with_cp.checkpoint_every = 1;
    expect_rejected([&] { verify(rec, with_cp); }, {"'options.checkpoints'", "expected none"});
    if constexpr (Rule::decay == la::decay_kind::vector) {
      buffer<A, 4> narrow({d.B, d.T, d.HV, 1}, layout::contiguous);
      expect_rejected([&] { verify({keys.view(), updates.view(), narrow.view()}, o); }, {"'record.log_decay'", "per-key decay"});
    }
    untouched();
    records_untouched();
    // A valid verify, then commits that must not write.
    verify(rec, o);
    const std::vector<double> kept = pool.get();
    auto commit_rec = [&](const la::draft_record<A>& r, const std::vector<std::int64_t>& acc) {
      la::commit_drafts(pool.view(), r, la::view(acc.data(), acc.size()), o);
    };
    expect_rejected([&] { commit_rec(rec, too_many); }, {"commit_drafts", "'num_accepted'", "entry 1 = 6"});
    expect_rejected([&] { commit_rec({keys.view(), updates.view(), {}}, ok); }, {"'record.log_decay'", "is missing"});
    expect_rejected([&] { commit_rec({keys.view(), keys.view(), decay.view()}, ok); }, {"'record.updates'", "[N, L, HV, V]"});
    const la::draft_record<A> aliased{la::tensor_view<A, 4>(pool.data(), keys.view().extents(), {0, 0, 0, 1}), updates.view(),
                                      decay.view()};
    expect_rejected([&] { commit_rec(aliased, ok); }, {"'pool'", "overlaps 'record.keys'"});
    CHECK(same_bits(pool.get(), kept));
  }
  // check_finite scans only the slots the call reads: NaN in an unused slot is fine.
  {
    buffer<A, 4> holey({5, d.HV, d.K, d.V}, layout::contiguous, std::vector<double>(std::size_t(5) * d.HV * d.K * d.V, 0.5));
    std::fill(holey.data() + 4 * d.HV * d.K * d.V, holey.data() + 5 * d.HV * d.K * d.V, A(NAN));
    auto o = base_options<T>(2, 1);
    o.check_finite = true;
    o.state_indices = la::view(fine.data(), fine.size());
    o.initial_state = holey.view();
    o.final_state = holey.view();
    CHECK_NOTHROW(la::recurrent_forward<Rule>(tb.inputs(), out.view(), o));
    const std::vector<std::int64_t> reads_nan{4, -1, 0};
    o.state_indices = la::view(reads_nan.data(), reads_nan.size());
    expect_rejected([&] { la::recurrent_forward<Rule>(tb.inputs(), out.view(), o); }, {"'options.initial_state'", "non-finite"});
  }
}

// ---- RLS: state [N, HV, K, V + K] through a pool ------------------------------------------

TEST_CASE("state pool: RLS reads and writes its (S, P) state through state_indices", "[serving][pool][rls]") {
  using T = double;
  std::mt19937_64 rng(12);
  const index_t B = 3, Tn = 6, H = 1, HV = 2, K = 3, V = 4, C = V + K, P = 5;
  std::normal_distribution<double> normal;
  auto random = [&](std::size_t n) {
    std::vector<T> x(n);
    for (auto& e : x) e = normal(rng);
    return x;
  };
  std::vector<T> q = random(std::size_t(B * Tn * H * K)), k = random(q.size()), v = random(std::size_t(B * Tn * HV * V));
  std::vector<T> g(std::size_t(B * Tn * HV), -0.05), out_pool(v.size()), out_plain(v.size());
  // A pool of valid RLS states: S random, P = I / 2 (symmetric positive definite).
  std::vector<T> pool(std::size_t(P * HV * K * C));
  for (index_t s = 0; s < P * HV; ++s)
    for (index_t i = 0; i < K; ++i)
      for (index_t j = 0; j < C; ++j) pool[std::size_t((s * K + i) * C + j)] = j < V ? normal(rng) : (j - V == i ? 0.5 : 0.0);
  const std::vector<T> before = pool;
  const std::vector<std::int64_t> slots{3, -1, 0};
  la::RLS::inputs<T> in{.q = la::view(q.data(), B, Tn, H, K), .k = la::view(k.data(), B, Tn, H, K),
                        .v = la::view(v.data(), B, Tn, HV, V), .g = la::view(g.data(), B, Tn, HV), .delta = 2.0};
  // Plain: the gathered states; the sequence without a slot starts from S = 0, P = I / delta.
  std::vector<T> plain(std::size_t(B * HV * K * C), 0.0);
  la::RLS::init_state(la::view(plain.data(), B, HV, K, C), 2.0);
  for (index_t n = 0; n < B; ++n)
    if (slots[std::size_t(n)] >= 0)
      std::copy_n(before.begin() + slots[std::size_t(n)] * HV * K * C, HV * K * C, plain.begin() + n * HV * K * C);
  la::options<T> opt;
  opt.initial_state = la::view(plain.data(), B, HV, K, C);
  opt.final_state = la::view(plain.data(), B, HV, K, C);
  la::recurrent_forward<la::RLS>(in, la::view(out_plain.data(), B, Tn, HV, V), opt);
  la::options<T> pooled;
  pooled.state_indices = la::view(slots.data(), slots.size());
  pooled.initial_state = la::view(pool.data(), P, HV, K, C);
  pooled.final_state = la::view(pool.data(), P, HV, K, C);
  la::recurrent_forward<la::RLS>(in, la::view(out_pool.data(), B, Tn, HV, V), pooled);
  CHECK(out_pool == out_plain);  // the same path: bit for bit
  for (index_t s = 0; s < P; ++s) {
    const auto n = std::find(slots.begin(), slots.end(), s) - slots.begin();
    const auto got = std::vector<T>(pool.begin() + s * HV * K * C, pool.begin() + (s + 1) * HV * K * C);
    if (n == std::ptrdiff_t(slots.size()))
      CHECK(got == std::vector<T>(before.begin() + s * HV * K * C, before.begin() + (s + 1) * HV * K * C));
    else
      CHECK(got == std::vector<T>(plain.begin() + n * HV * K * C, plain.begin() + (n + 1) * HV * K * C));
  }
  // Checkpoints are refused for RLS, before anything is written.
  std::vector<T> cp(std::size_t(B * Tn * HV * K * C), 0.0);
  pooled.checkpoint_every = 1;
  pooled.checkpoints = la::view(cp.data(), B, Tn, HV, K, C);
  const std::vector<T> kept = pool;
  expect_rejected([&] { la::recurrent_forward<la::RLS>(in, la::view(out_pool.data(), B, Tn, HV, V), pooled); },
                  {"'options.checkpoints' is set, expected none: RLS writes no checkpoints"});
  CHECK(pool == kept);
}
