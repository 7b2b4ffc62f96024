// SPDX-License-Identifier: MIT
/// \file
/// Shared body of the consumer projects (find_package, add_subdirectory, FetchContent): a
/// program that only sees <linattn/linattn.hpp> through the `linattn::linattn` target runs a
/// small random ScalarDecay and GatedDelta problem through the chunkwise and the recurrent form
/// and checks that they agree. The consumer projects compile it with -Wall -Wextra -Wpedantic
/// -Werror (and -march=native where the compiler knows it): the library must add no warning. Exit status 0 = agree, 1 = mismatch, 2 = linattn threw.
#include <linattn/linattn.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <random>
#include <vector>

static_assert(LINATTN_VERSION == LINATTN_VERSION_MAJOR * 10000 + LINATTN_VERSION_MINOR * 100 + LINATTN_VERSION_PATCH,
              "the version macros come with <linattn/linattn.hpp>");

#ifndef LINATTN_CONSUMER_KIND
#define LINATTN_CONSUMER_KIND "unknown"
#endif

namespace la = linattn;

int main() {
  // Odd sizes on purpose: T is not a multiple of the chunk size, K != V, HV = 2 H (grouped heads).
  constexpr int B = 2, T = 37, H = 2, HV = 4, K = 8, V = 12;
  std::mt19937 rng(20240611u);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_real_distribution<float> log_gate(-0.5f, -0.01f);  // g <= 0

  std::vector<float> q(B * T * H * K), k(B * T * H * K), v(B * T * HV * V), g(B * T * HV);
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = unit(rng);
  for (float& e : g) e = log_gate(rng);
  const float poison = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> o_chunk(B * T * HV * V, poison), o_rec(B * T * HV * V, poison);
  std::vector<float> d_chunk(B * T * HV * V, poison), d_rec(B * T * HV * V, poison), beta(B * T * HV);
  for (float& e : beta) e = 0.5f + 0.5f * unit(rng);  // (0, 1]
  std::vector<float> kn = k;  // unit keys for the delta rule
  for (std::size_t t = 0; t < kn.size(); t += K) {
    float n2 = 0;
    for (int i = 0; i < K; ++i) n2 += kn[t + i] * kn[t + i];
    for (int i = 0; i < K; ++i) kn[t + i] /= std::sqrt(n2);
  }

  la::ScalarDecay::inputs<float> in{.q = la::view(q.data(), B, T, H, K),
                                    .k = la::view(k.data(), B, T, H, K),
                                    .v = la::view(v.data(), B, T, HV, V),
                                    .g = la::view(g.data(), B, T, HV)};
  la::options opt;
  opt.chunk_size = 16;
  try {
    la::chunkwise_forward<la::ScalarDecay>(in, la::view(o_chunk.data(), B, T, HV, V), opt);
    la::recurrent_forward<la::ScalarDecay>(in, la::view(o_rec.data(), B, T, HV, V), opt);
    la::GatedDelta::inputs<float> gd{.q = in.q, .k = la::view(kn.data(), B, T, H, K), .v = in.v, .g = in.g,
                                     .beta = la::view(beta.data(), B, T, HV)};
    la::chunkwise_forward<la::GatedDelta>(gd, la::view(d_chunk.data(), B, T, HV, V), opt);
    la::recurrent_forward<la::GatedDelta>(gd, la::view(d_rec.data(), B, T, HV, V), opt);
    o_chunk.insert(o_chunk.end(), d_chunk.begin(), d_chunk.end());
    o_rec.insert(o_rec.end(), d_rec.begin(), d_rec.end());
  } catch (const std::exception& e) {
    std::printf("linattn consumer (%s): linattn threw: %s\n", LINATTN_CONSUMER_KIND, e.what());
    return 2;
  }

  double max_diff = 0.0, max_ref = 0.0;
  bool finite = true;
  for (std::size_t i = 0; i < o_rec.size(); ++i) {
    finite = finite && std::isfinite(o_chunk[i]) && std::isfinite(o_rec[i]);
    max_diff = std::max(max_diff, std::abs(double(o_chunk[i]) - double(o_rec[i])));
    max_ref = std::max(max_ref, std::abs(double(o_rec[i])));
  }
  const double rel = max_ref > 0.0 ? max_diff / max_ref : 1.0;
  const bool ok = finite && max_ref > 0.0 && rel < 1e-4;
  std::printf("linattn consumer (%s): chunkwise vs recurrent max|diff|/max|ref| = %.3g (max|ref| = %.3g)%s: %s\n",
              LINATTN_CONSUMER_KIND, rel, max_ref, finite ? "" : ", non-finite output",
              ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}
