// SPDX-License-Identifier: MIT
// Serving: a toy scheduler over a pool of GatedDelta states. Requests arrive over time, take
// a pool slot, prefill their prompt and decode until their length, then leave (their slot is
// reused). Every step is one mixed chunkwise call (prompts and single decode tokens packed
// with cu_seqlens, states read and written in place through state_indices) plus, for the
// requests that speculate, one verify_drafts call on up to 4 draft tokens (keeping a compact
// record of each draft token's write) and a commit of the accepted ones (rejected drafts are
// rolled back, not recomputed). Requests that share the
// system prompt start from its cached state, taken from a checkpoint of the first such
// request's prefill. Every output is checked against a plain full-sequence run.
//
//   serving [--requests N] [--slots P] [--seed S]
#include <linattn/linattn.hpp>

#include "example_args.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace la = linattn;

namespace {

constexpr int H = 2, HV = 4, K = 16, V = 12;  // grouped value heads, K != V
constexpr int C = 8;                           // chunk size
constexpr int prefix = 32;                     // shared system prompt (a multiple of C)
constexpr int state_size = HV * K * V;

/// One token's inputs: q, k [H, K]; v [HV, V]; g, beta [HV].
struct token {
  std::vector<float> q, k, v, g, beta;
};

token random_token(std::mt19937& rng) {
  std::normal_distribution<float> normal;
  token t{std::vector<float>(H * K), std::vector<float>(H * K), std::vector<float>(HV * V), std::vector<float>(HV),
          std::vector<float>(HV)};
  for (auto& e : t.q) e = normal(rng);
  for (auto& e : t.v) e = normal(rng);
  for (int h = 0; h < H; ++h) {  // unit keys
    float n2 = 0;
    for (int i = 0; i < K; ++i) n2 += std::pow(t.k[h * K + i] = normal(rng), 2.0f);
    for (int i = 0; i < K; ++i) t.k[h * K + i] /= std::sqrt(n2);
  }
  for (auto& e : t.g) e = -std::log1p(std::exp(-(normal(rng) + 3.0f)));  // log sigmoid
  for (auto& e : t.beta) e = 1.0f / (1.0f + std::exp(-normal(rng)));
  return t;
}

struct request {
  int arrival = 0, prompt = 0;  // step it arrives; prompt tokens
  bool shares_prefix = false, speculates = false;
  std::vector<token> tokens;     // the whole sequence (prompt, then what is decoded)
  std::vector<float> out;        // [len, HV, V] as served
  std::vector<char> served;      // per position
  int slot = -1, pos = 0;        // pool slot, tokens consumed
};

/// Packed inputs of several token runs: q, k [1, T, H, K], v [1, T, HV, V], g, beta [1, T, HV].
struct batch {
  std::vector<float> q, k, v, g, beta;
  std::vector<std::int64_t> cu{0};
  std::vector<std::int32_t> slots;
  void add(const std::vector<token>& tokens, int from, int count, int slot) {
    for (int t = from; t < from + count; ++t) {
      const token& x = tokens[std::size_t(t)];
      q.insert(q.end(), x.q.begin(), x.q.end());
      k.insert(k.end(), x.k.begin(), x.k.end());
      v.insert(v.end(), x.v.begin(), x.v.end());
      g.insert(g.end(), x.g.begin(), x.g.end());
      beta.insert(beta.end(), x.beta.begin(), x.beta.end());
    }
    cu.push_back(cu.back() + count);
    slots.push_back(slot);
  }
  std::int64_t T() const { return cu.back(); }
  la::GatedDelta::inputs<float> inputs(std::int64_t B = 1) const {
    const std::int64_t t = T() / B;
    return {.q = la::view(q.data(), B, t, H, K), .k = la::view(k.data(), B, t, H, K), .v = la::view(v.data(), B, t, HV, V),
            .g = la::view(g.data(), B, t, HV), .beta = la::view(beta.data(), B, t, HV)};
  }
};

}  // namespace

int main(int argc, char** argv) {
  long requests = 12, slots = 4, seed = 1;
  example::args("serving", "a toy scheduler: state pool, mixed prefill + decode, prefix reuse, draft-and-verify")
      .integer("requests", requests, 1, 1000, "requests to serve")
      .integer("slots", slots, 1, 256, "state pool slots (requests running at once)")
      .integer("seed", seed, 0, 1 << 30, "random seed")
      .parse(argc, argv);
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::uniform_int_distribution<int> coin(0, 1), draft_count(1, 4);

  // The requests: half share the system prompt, half speculate; arrivals spread over time.
  std::vector<token> system_prompt;
  for (int t = 0; t < prefix; ++t) system_prompt.push_back(random_token(rng));
  std::vector<request> reqs(static_cast<std::size_t>(requests));
  for (std::size_t r = 0; r < reqs.size(); ++r) {
    request& q = reqs[r];
    q.arrival = int(r) * 2 + coin(rng);
    q.shares_prefix = r % 2 == 0;
    q.speculates = r % 3 != 0;
    q.prompt = q.shares_prefix ? prefix + 1 + int(rng() % 20) : 1 + int(rng() % 40);
    const int len = q.prompt + 5 + int(rng() % 30);
    if (q.shares_prefix) q.tokens = system_prompt;
    while (int(q.tokens.size()) < len) q.tokens.push_back(random_token(rng));
    q.out.assign(std::size_t(len) * HV * V, NAN);
    q.served.assign(std::size_t(len), 0);
  }

  std::vector<float> pool(std::size_t(slots) * state_size);    // [P, HV, K, V]
  std::vector<float> prefix_state;                              // [HV, K, V] once cached
  std::vector<int> free_slots;
  for (int s = int(slots) - 1; s >= 0; --s) free_slots.push_back(s);
  const auto pool_view = [&] { return la::view(pool.data(), slots, HV, K, V); };
  long calls = 0, drafted = 0, accepted_total = 0, reused = 0;

  for (int step = 0;; ++step) {
    // Admit arrivals while slots are free; a request sharing the cached prefix starts from it.
    for (request& q : reqs) {
      if (q.slot >= 0 || q.pos > 0 || q.arrival > step || free_slots.empty()) continue;
      q.slot = free_slots.back();
      free_slots.pop_back();
      float* s = pool.data() + std::size_t(q.slot) * state_size;
      if (q.shares_prefix && !prefix_state.empty()) {
        std::copy(prefix_state.begin(), prefix_state.end(), s);
        q.pos = prefix;
        ++reused;
      } else {
        std::fill(s, s + state_size, 0.0f);
      }
    }
    // One mixed call: the rest of each prompt, or the next token of a plain decoding request.
    batch mixed, drafts;
    std::vector<request*> in_mixed, in_drafts;
    std::vector<int> draft_accept;
    for (request& q : reqs) {
      const int len = int(q.tokens.size());
      if (q.slot < 0 || q.pos >= len) continue;
      if (q.pos < q.prompt) {
        mixed.add(q.tokens, q.pos, q.prompt - q.pos, q.slot);
        in_mixed.push_back(&q);
      } else if (q.speculates) {
        // Drafts: the true next tokens up to a random mismatch, then wrong guesses.
        const int n = std::min(draft_count(rng), len - q.pos), good = int(rng() % unsigned(n + 1));
        std::vector<token> guess(q.tokens.begin() + q.pos, q.tokens.begin() + q.pos + n);
        for (int j = good; j < n; ++j) guess[std::size_t(j)] = random_token(rng);
        drafts.add(guess, 0, n, q.slot);
        in_drafts.push_back(&q);
        draft_accept.push_back(good);
      } else {
        mixed.add(q.tokens, q.pos, 1, q.slot);
        in_mixed.push_back(&q);
      }
    }
    if (in_mixed.empty() && in_drafts.empty()) {
      if (std::all_of(reqs.begin(), reqs.end(), [](const request& q) { return q.pos >= int(q.tokens.size()); })) break;
      continue;  // waiting for arrivals
    }
    if (!in_mixed.empty()) {
      // Checkpoints every `prefix` tokens: entry 0 of a request prefilling from token 0 is the
      // state after the system prompt.
      std::vector<float> out(std::size_t(mixed.T()) * HV * V);
      std::int64_t longest = 0;
      for (std::size_t n = 0; n + 1 < mixed.cu.size(); ++n) longest = std::max(longest, mixed.cu[n + 1] - mixed.cu[n]);
      const std::int64_t J = (longest + prefix - 1) / prefix, N = std::int64_t(in_mixed.size());
      std::vector<float> cps(std::size_t(N * J) * state_size, NAN);
      la::options<float> opt;
      opt.chunk_size = C;
      opt.cu_seqlens = la::view(mixed.cu.data(), mixed.cu.size());
      opt.state_indices = la::view(mixed.slots.data(), mixed.slots.size());
      opt.initial_state = pool_view();
      opt.final_state = pool_view();
      opt.checkpoint_every = prefix;
      opt.checkpoints = la::view(cps.data(), N, J, HV, K, V);
      la::chunkwise_forward<la::GatedDelta>(mixed.inputs(), la::view(out.data(), 1, mixed.T(), HV, V), opt);
      ++calls;
      for (std::size_t n = 0; n < in_mixed.size(); ++n) {
        request& q = *in_mixed[n];
        const auto count = int(mixed.cu[n + 1] - mixed.cu[n]);
        std::copy_n(out.begin() + mixed.cu[n] * HV * V, count * HV * V, q.out.begin() + std::ptrdiff_t(q.pos) * HV * V);
        std::fill_n(q.served.begin() + q.pos, count, 1);
        if (q.shares_prefix && q.pos == 0 && prefix_state.empty() && count >= prefix)
          prefix_state.assign(cps.begin() + std::ptrdiff_t(n * J) * state_size,
                              cps.begin() + std::ptrdiff_t(n * J + 1) * state_size);
        q.pos += count;
      }
    }
    if (!in_drafts.empty()) {
      // Verify the drafts from the pool (not written), keep the outputs of the accepted ones,
      // commit the state after them.
      const std::int64_t N = std::int64_t(in_drafts.size());
      std::int64_t L = 0;  // the most drafts of one request
      for (std::size_t n = 0; n + 1 < drafts.cu.size(); ++n) L = std::max(L, drafts.cu[n + 1] - drafts.cu[n]);
      // The compact record keeps each draft token's write (K + V + 1 numbers per head) instead
      // of the state after it (K x V).
      std::vector<float> out(std::size_t(drafts.T()) * HV * V), keys(std::size_t(N * L) * HV * K),
          writes(std::size_t(N * L) * HV * V), decays(std::size_t(N * L) * HV);
      const la::draft_record<float> record{la::view(keys.data(), N, L, HV, K), la::view(writes.data(), N, L, HV, V),
                                           la::view(decays.data(), N, L, HV, 1)};
      la::options<float> opt;
      opt.cu_seqlens = la::view(drafts.cu.data(), drafts.cu.size());
      opt.state_indices = la::view(drafts.slots.data(), drafts.slots.size());
      la::verify_drafts<la::GatedDelta>(drafts.inputs(), la::view(out.data(), 1, drafts.T(), HV, V), pool_view(), record,
                                        opt);
      la::commit_drafts(pool_view(), record, la::view(draft_accept.data(), draft_accept.size()), opt);
      calls += 2;
      for (std::size_t n = 0; n < in_drafts.size(); ++n) {
        request& q = *in_drafts[n];
        const int a = draft_accept[n];
        std::copy_n(out.begin() + drafts.cu[n] * HV * V, a * HV * V, q.out.begin() + std::ptrdiff_t(q.pos) * HV * V);
        std::fill_n(q.served.begin() + q.pos, a, 1);
        q.pos += a;
        drafted += drafts.cu[n + 1] - drafts.cu[n];
        accepted_total += a;
      }
    }
    // Finished requests leave and free their slot.
    for (request& q : reqs)
      if (q.slot >= 0 && q.pos >= int(q.tokens.size())) free_slots.push_back(q.slot), q.slot = -1;
  }

  // Check: every served output against a plain full-sequence run of its request.
  double worst = 0;
  long checked = 0;
  for (const request& q : reqs) {
    batch whole;
    whole.add(q.tokens, 0, int(q.tokens.size()), 0);
    std::vector<float> want(q.out.size());
    la::recurrent_forward<la::GatedDelta>(whole.inputs(), la::view(want.data(), 1, whole.T(), HV, V));
    for (std::size_t t = 0; t < q.served.size(); ++t) {
      const bool must = !(q.shares_prefix && int(t) < prefix);  // prefix reused: not recomputed
      if (!q.served[t]) {
        if (must) return std::fprintf(stderr, "serving: position %zu of a request was never served\n", t), 1;
        continue;
      }
      double diff = 0, scale = 0;
      for (int j = 0; j < HV * V; ++j) {
        const std::size_t i = t * HV * V + std::size_t(j);
        diff = std::max(diff, double(std::abs(q.out[i] - want[i])));
        scale = std::max(scale, double(std::abs(want[i])));
      }
      worst = std::max(worst, diff / std::max(scale, 1e-30));
      ++checked;
    }
  }
  std::printf("served %ld requests with %ld slots in %ld library calls: %ld outputs checked, %ld requests reused "
              "the cached prefix, %ld of %ld draft tokens accepted\n",
              requests, slots, calls, checked, reused, accepted_total, drafted);
  std::printf("max relative error against full-sequence runs: %.2e\n", worst);
  if (!(worst < 1e-4)) return std::fprintf(stderr, "serving: outputs differ from the full-sequence runs\n"), 1;
  return 0;
}
