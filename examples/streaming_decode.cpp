// SPDX-License-Identifier: MIT
// Streaming decode: a token loop that serves one new token at a time with decode_step, for a
// matrix-state rule (GatedDelta) and for softmax attention over a KV cache. The recurrent
// state stays HV x K x V numbers however long the stream gets; the KV cache grows by
// H K + HV V numbers per token, and so does softmax's time per token.
//
//   streaming_decode [--tokens N]     (default 8192)
#include <linattn/linattn.hpp>

#include "example_args.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace la = linattn;

int main(int argc, char** argv) {
  long tokens = 8192;
  example::args("streaming_decode", "token-by-token decoding: GatedDelta state against a softmax KV cache")
      .integer("tokens", tokens, 1, 1 << 20, "tokens to decode")
      .parse(argc, argv);
  const int H = 4, HV = 4, K = 64, V = 64;  // one sequence (B = 1), 4 heads of dim 64

  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> all_q(tokens * H * K), all_k(tokens * H * K), all_v(tokens * HV * V), all_g(tokens * HV),
      all_beta(tokens * HV);
  for (auto& e : all_q) e = normal(rng);
  for (auto& e : all_v) e = normal(rng);
  for (long t = 0; t < tokens * H; ++t) {  // unit keys, as the delta rule expects
    float n2 = 0;
    for (int i = 0; i < K; ++i) n2 += std::pow(all_k[t * K + i] = normal(rng), 2.0f);
    for (int i = 0; i < K; ++i) all_k[t * K + i] /= std::sqrt(n2);
  }
  for (auto& e : all_g) e = -0.01f;   // gate exp(-0.01) per token
  for (auto& e : all_beta) e = 0.5f;  // write strength

  std::vector<float> state(HV * K * V, 0.0f), o_delta(V * HV), o_soft(V * HV), o_last(HV * V);
  la::kv_cache<float> cache(1, H, HV, K, V);
  la::options<float> opt;
  opt.threads = 1;
  double delta_s = 0, soft_s = 0;  // seconds spent since the last report
  long since = 0;
  using clock = std::chrono::steady_clock;

  std::printf("%8s  %16s  %16s  %16s  %16s\n", "tokens", "GatedDelta state", "softmax KV cache", "GatedDelta us/tok",
              "softmax us/tok");
  for (long t = 0; t < tokens; ++t) {
    auto q = la::view(&all_q[t * H * K], 1, 1, H, K), k = la::view(&all_k[t * H * K], 1, 1, H, K);
    auto v = la::view(&all_v[t * HV * V], 1, 1, HV, V);
    const auto t0 = clock::now();
    la::decode_step<la::GatedDelta>(
        la::GatedDelta::inputs<float>{.q = q, .k = k, .v = v, .g = la::view(&all_g[t * HV], 1, 1, HV),
                                      .beta = la::view(&all_beta[t * HV], 1, 1, HV)},
        la::view(o_delta.data(), 1, 1, HV, V), la::view(state.data(), 1, HV, K, V), opt);
    const auto t1 = clock::now();
    la::decode_step<la::SoftmaxAttention>(la::SoftmaxAttention::inputs<float>{.q = q, .k = k, .v = v},
                                          la::view(o_soft.data(), 1, 1, HV, V), cache, opt);
    const auto t2 = clock::now();
    delta_s += std::chrono::duration<double>(t1 - t0).count();
    soft_s += std::chrono::duration<double>(t2 - t1).count();
    ++since;
    const long n = t + 1;
    if (((n & (n - 1)) == 0 && n >= 16) || n == tokens) {  // powers of two
      std::printf("%8ld  %13.1f KiB  %13.1f KiB  %16.1f  %16.1f\n", n, state.size() * sizeof(float) / 1024.0,
                  cache.bytes() / 1024.0, 1e6 * delta_s / since, 1e6 * soft_s / since);
      delta_s = soft_s = 0;
      since = 0;
    }
  }

  // The streamed outputs are the model's outputs: compare the last one with a chunkwise
  // prefill of the whole stream (GatedDelta) and with the direct softmax (SoftmaxAttention).
  std::vector<float> full(tokens * HV * V);
  la::chunkwise_forward<la::GatedDelta>(
      la::GatedDelta::inputs<float>{.q = la::view(all_q.data(), 1, tokens, H, K), .k = la::view(all_k.data(), 1, tokens, H, K),
                                    .v = la::view(all_v.data(), 1, tokens, HV, V), .g = la::view(all_g.data(), 1, tokens, HV),
                                    .beta = la::view(all_beta.data(), 1, tokens, HV)},
      la::view(full.data(), 1, tokens, HV, V));
  double d1 = 0, n1 = 0;
  for (int j = 0; j < HV * V; ++j) {
    d1 = std::fmax(d1, std::fabs(full[(tokens - 1) * HV * V + j] - o_delta[j]));
    n1 = std::fmax(n1, std::fabs(full[(tokens - 1) * HV * V + j]));
  }
  la::parallel_forward<la::SoftmaxAttention>(
      la::SoftmaxAttention::inputs<float>{.q = la::view(all_q.data(), 1, tokens, H, K), .k = la::view(all_k.data(), 1, tokens, H, K),
                                          .v = la::view(all_v.data(), 1, tokens, HV, V)},
      la::view(full.data(), 1, tokens, HV, V));
  double d2 = 0, n2 = 0;
  for (int j = 0; j < HV * V; ++j) {
    d2 = std::fmax(d2, std::fabs(full[(tokens - 1) * HV * V + j] - o_soft[j]));
    n2 = std::fmax(n2, std::fabs(full[(tokens - 1) * HV * V + j]));
  }
  std::printf("last token, decode vs full-sequence form: GatedDelta %.1e, softmax %.1e (max relative difference)\n",
              d1 / n1, d2 / n2);
  return d1 / n1 < 1e-3 && d2 / n2 < 1e-3 ? 0 : 1;
}
