// SPDX-License-Identifier: MIT
// MQAR capacity (docs/math.md#mqar, the seed paper's construction): one test-time-regression
// layer, a length-2 short convolution for keys (k_t = x_{t-1}), q_t = v_t = x_t, d = 64, no
// learned parameters. An example holds P key-value pairs k_1 v_1 ... k_P v_P, then each key
// again at a power-law-distributed even offset of the query region (filler tokens elsewhere);
// a query is right when the layer's output at the queried key is closer (dot product) to the
// key's value embedding than to any other value of the example.
//
// Embeddings are drawn per example: orthonormal (random rotation) where P <= d, random unit
// vectors otherwise, for keys and values alike; filler tokens embed to 0.
//
//   mqar [--examples N] [--max-pairs P]     (defaults 32 and 256)
#include <linattn/linattn.hpp>

#include "example_args.hpp"

#include <algorithm>
#include <array>
#include <type_traits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace la = linattn;
constexpr int d = 64;

/// n unit vectors of dim d (rows): orthonormal when n <= d, else independent random directions.
std::vector<double> embeddings(std::mt19937_64& rng, int n) {
  std::normal_distribution<double> normal;
  std::vector<double> e(std::size_t(n) * d);
  for (auto& x : e) x = normal(rng);
  for (int r = 0; r < n; ++r) {
    double* row = &e[std::size_t(r) * d];
    if (n <= d)  // Gram-Schmidt against the earlier rows
      for (int s = 0; s < r; ++s) {
        const double* prev = &e[std::size_t(s) * d];
        const double dot = std::inner_product(row, row + d, prev, 0.0);
        for (int i = 0; i < d; ++i) row[i] -= dot * prev[i];
      }
    const double norm = std::sqrt(std::inner_product(row, row + d, row, 0.0));
    for (int i = 0; i < d; ++i) row[i] /= norm;
  }
  return e;
}

/// One batch of MQAR examples: x [E, T, d] embedded tokens, and per query (example, position,
/// index of its pair).
struct batch {
  int E = 0, T = 0, P = 0;
  std::vector<double> x, values;                    // [E, T, d], [E, P, d]
  std::vector<std::array<int, 3>> queries;          // (example, position, pair)
};

batch make_batch(std::mt19937_64& rng, int E, int P) {
  batch b;
  b.E = E, b.P = P, b.T = 8 * P;  // context 2P, query region 6P: 3P even slots for P queries
  b.x.assign(std::size_t(E) * b.T * d, 0.0);
  b.values.resize(std::size_t(E) * P * d);
  const int slots = (b.T - 2 * P) / 2;
  std::vector<double> w(slots);  // Zoology's power law p(gap) ~ a gap^(a-1), a = 0.01
  for (int g = 0; g < slots; ++g) w[g] = 0.01 * std::pow(g + 1.0, 0.01 - 1.0);
  for (int e = 0; e < E; ++e) {
    const auto keys = embeddings(rng, P), vals = embeddings(rng, P);
    std::copy(vals.begin(), vals.end(), b.values.begin() + std::size_t(e) * P * d);
    auto put = [&](int t, const double* src) { std::copy(src, src + d, &b.x[(std::size_t(e) * b.T + t) * d]); };
    for (int i = 0; i < P; ++i) {
      put(2 * i, &keys[std::size_t(i) * d]);
      put(2 * i + 1, &vals[std::size_t(i) * d]);
    }
    std::vector<double> weight = w;  // gaps without replacement
    for (int i = 0; i < P; ++i) {
      std::discrete_distribution<int> pick(weight.begin(), weight.end());
      const int gap = pick(rng);
      weight[gap] = 0;
      const int t = 2 * P + 2 * gap;
      put(t, &keys[std::size_t(i) * d]);
      b.queries.push_back({e, t, i});
    }
  }
  return b;
}

/// Outputs [E, T, d] of one layer of `Rule` (chunkwise form, float64).
template <class Rule>
std::vector<double> layer(const batch& b, double rls_ridge) {
  const int E = b.E, T = b.T;
  std::vector<double> k(b.x.size(), 0.0), o(b.x.size()), ones(std::size_t(E) * T, 1.0);
  for (int e = 0; e < E; ++e)  // short conv: k_t = x_{t-1}
    std::copy(&b.x[(std::size_t(e) * T) * d], &b.x[(std::size_t(e) * T + T - 1) * d], &k[(std::size_t(e) * T + 1) * d]);
  auto x = la::view(b.x.data(), E, T, 1, d);
  auto kv = la::view(static_cast<const double*>(k.data()), E, T, 1, d);
  la::options<double> opt;
  opt.scale = 1.0;
  if constexpr (std::is_same_v<Rule, la::Delta>)
    la::chunkwise_forward<Rule>({.q = x, .k = kv, .v = x, .beta = la::view(static_cast<const double*>(ones.data()), E, T, 1)},
                                la::view(o.data(), E, T, 1, d), opt);
  else if constexpr (std::is_same_v<Rule, la::RLS>)
    la::chunkwise_forward<Rule>({.q = x, .k = kv, .v = x, .delta = rls_ridge}, la::view(o.data(), E, T, 1, d), opt);
  else
    la::chunkwise_forward<Rule>({.q = x, .k = kv, .v = x}, la::view(o.data(), E, T, 1, d), opt);
  return o;
}

double accuracy(const batch& b, const std::vector<double>& o) {
  int right = 0;
  for (const auto& [e, t, i] : b.queries) {
    const double* out = &o[(std::size_t(e) * b.T + t) * d];
    int best = 0;
    double best_dot = -1e300;
    for (int j = 0; j < b.P; ++j) {
      const double* val = &b.values[(std::size_t(e) * b.P + j) * d];
      const double dot = std::inner_product(out, out + d, val, 0.0);
      if (dot > best_dot) best_dot = dot, best = j;
    }
    right += best == i;
  }
  return 100.0 * right / double(b.queries.size());
}

int main(int argc, char** argv) {
  long examples = 32, pairs = 256;
  example::args("mqar", "associative-recall accuracy of Hebbian, Delta, NLMS and RLS layers (one layer, d = 64)")
      .integer("examples", examples, 1, 100000, "examples per row")
      .integer("max-pairs", pairs, 16, 4096, "largest number of key-value pairs P (rows P = 16, 32, ...)")
      .parse(argc, argv);
  const int E = int(examples), max_pairs = int(pairs);
  const double ridge = 1e-3;  // RLS: unweighted (no forgetting), P_0 = I / ridge
  std::printf("MQAR, d = %d, one layer, k_t = x_{t-1}, q_t = v_t = x_t; accuracy (%%) over %d examples per row\n", d, E);
  std::printf("%5s %6s  %8s %8s %8s %8s\n", "P", "T", "Hebbian", "Delta", "NLMS", "RLS");
  std::mt19937_64 rng(2025);
  for (int P = 16; P <= max_pairs; P *= 2) {
    const batch b = make_batch(rng, E, P);
    std::printf("%5d %6d  %8.1f %8.1f %8.1f %8.1f\n", P, b.T, accuracy(b, layer<la::Hebbian>(b, ridge)),
                accuracy(b, layer<la::Delta>(b, ridge)), accuracy(b, layer<la::NLMS>(b, ridge)),
                accuracy(b, layer<la::RLS>(b, ridge)));
  }
  std::printf("(Delta: beta = 1; NLMS: beta = 1/(||k||^2 + 1e-6); RLS: ridge %.0e; keys orthonormal for P <= %d)\n",
              ridge, d);
  return 0;
}
