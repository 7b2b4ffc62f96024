// SPDX-License-Identifier: MIT
// Online regression on a switching AR process (seed paper Section 5,
// docs/math.md#online-regression): keys follow
//   k_{t+1} = a k_t + 0.02 eps_t,  a = 0.9 for t < T/4, then 0.999,  eps_t ~ N(0, Sigma),
// values v_t = k_{t+1} / ||k_{t+1}||, queries q_t = k_{t+1}. Each model predicts y_t from the
// pairs (k_i, v_i), i <= t (no learned parameters), and pays loss_t = ||v_{t+1} - y_t||^2:
//   linear attention   Hebbian memory, output normalised y = o / ||o||
//   RLS                unweighted recursive least squares (ridge 1e-3)
//   softmax            softmax attention with QK-norm, temperature 0.05
//   p = 1              local-linear attention, same weights, ridge 1e-3
//   naive              y_t = v_t
// Writes the per-step loss (mean over seeds) as CSV and prints the phase means.
// Plot: python3 examples/plot_online_regression.py online_regression.csv online_regression.png
//
//   online_regression [--seeds N] [--csv FILE]     (default 5 seeds; no CSV unless --csv)
#include <linattn/linattn.hpp>

#include "example_args.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace la = linattn;
constexpr int dk = 64, T = 256;
constexpr int models = 5;
const char* const model_names[models] = {"naive", "linear_attention", "rls", "softmax", "p1_attention"};

/// Keys k_0 .. k_{T+1} of one run ([T + 2, dk]).
std::vector<double> switching_ar(std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  auto eps = [&] {  // Sigma = 0.5 I + 0.5 1 1^T: unit diagonal, correlated components
    std::vector<double> e(dk);
    const double common = normal(rng);
    for (auto& x : e) x = std::sqrt(0.5) * normal(rng) + std::sqrt(0.5) * common;
    return e;
  };
  std::vector<double> k(std::size_t(T + 2) * dk);
  auto e0 = eps();  // k_0 from the phase-1 stationary law N(0, 0.02^2 / (1 - 0.81) Sigma)
  for (int i = 0; i < dk; ++i) k[i] = 0.02 / std::sqrt(1 - 0.81) * e0[i];
  for (int t = 0; t + 1 < T + 2; ++t) {
    const double a = t < T / 4 ? 0.9 : 0.999;
    const auto e = eps();
    for (int i = 0; i < dk; ++i) k[(t + 1) * dk + i] = a * k[t * dk + i] + 0.02 * e[i];
  }
  return k;
}

std::vector<double> unit_rows(const double* x, int rows) {
  std::vector<double> y(x, x + std::size_t(rows) * dk);
  for (int r = 0; r < rows; ++r) {
    double n2 = 0;
    for (int i = 0; i < dk; ++i) n2 += y[r * dk + i] * y[r * dk + i];
    for (int i = 0; i < dk; ++i) y[r * dk + i] /= std::sqrt(n2);
  }
  return y;
}

/// Per-step losses [models][T] of one run.
std::vector<std::vector<double>> run(std::mt19937_64& rng) {
  const auto keys = switching_ar(rng);
  const auto k = std::vector<double>(keys.begin(), keys.begin() + T * dk);  // k_0 .. k_{T-1}
  const auto q = std::vector<double>(keys.begin() + dk, keys.begin() + (T + 1) * dk);  // q_t = k_{t+1}
  const auto v_all = unit_rows(keys.data() + dk, T + 1);  // v_0 .. v_T (v_t = k_{t+1} / ||k_{t+1}||)
  const auto v = std::vector<double>(v_all.begin(), v_all.begin() + T * dk);
  const auto kn = unit_rows(k.data(), T), qn = unit_rows(q.data(), T);  // QK-norm
  auto view = [](const std::vector<double>& x) { return la::view(x.data(), 1, T, 1, dk); };

  std::vector<std::vector<double>> y(models, std::vector<double>(std::size_t(T) * dk));
  y[0] = v;  // naive: y_t = v_t
  la::options<double> plain;
  plain.scale = 1.0;
  la::chunkwise_forward<la::Hebbian>({.q = view(q), .k = view(k), .v = view(v)}, la::view(y[1].data(), 1, T, 1, dk), plain);
  y[1] = unit_rows(y[1].data(), T);  // output normalisation
  la::chunkwise_forward<la::RLS>({.q = view(q), .k = view(k), .v = view(v), .delta = 1e-3}, la::view(y[2].data(), 1, T, 1, dk),
                                 plain);
  la::options<double> sharp;
  sharp.scale = 1.0 / 0.05;  // temperature 0.05 on unit q, k
  la::chunkwise_forward<la::SoftmaxAttention>({.q = view(qn), .k = view(kn), .v = view(v)}, la::view(y[3].data(), 1, T, 1, dk),
                                              sharp);
  la::parallel_forward<la::LocalLinearAttention>({.q = view(qn), .k = view(kn), .v = view(v), .ridge = 1e-3},
                                                 la::view(y[4].data(), 1, T, 1, dk), sharp);

  std::vector<std::vector<double>> loss(models, std::vector<double>(T));
  for (int m = 0; m < models; ++m)
    for (int t = 0; t < T; ++t) {
      double s = 0;
      for (int i = 0; i < dk; ++i) s += std::pow(v_all[(t + 1) * dk + i] - y[m][t * dk + i], 2);
      loss[m][t] = s;
    }
  return loss;
}

int main(int argc, char** argv) {
  long seeds_arg = 5;
  std::string csv;
  example::args("online_regression", "per-step loss of five online predictors on a switching AR process")
      .integer("seeds", seeds_arg, 1, 10000, "random seeds averaged")
      .text("csv", csv, "also write the per-step mean losses to this CSV file")
      .parse(argc, argv);
  const int seeds = int(seeds_arg);
  std::vector<std::vector<double>> mean(models, std::vector<double>(T, 0.0));
  for (int s = 0; s < seeds; ++s) {
    std::mt19937_64 rng(1000 + s);
    const auto loss = run(rng);
    for (int m = 0; m < models; ++m)
      for (int t = 0; t < T; ++t) mean[m][t] += loss[m][t] / seeds;
  }
  if (!csv.empty()) {
    std::FILE* f = std::fopen(csv.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "online_regression: cannot write %s\n", csv.c_str());
      return 2;
    }
    std::fprintf(f, "t");
    for (auto* n : model_names) std::fprintf(f, ",%s", n);
    std::fprintf(f, "\n");
    for (int t = 0; t < T; ++t) {
      std::fprintf(f, "%d", t);
      for (int m = 0; m < models; ++m) std::fprintf(f, ",%.6g", mean[m][t]);
      std::fprintf(f, "\n");
    }
    std::fclose(f);
  }

  std::printf("online regression, switching AR (dk = %d, T = %d, switch at t = %d), %d seed(s)\n", dk, T, T / 4, seeds);
  std::printf("%-18s %12s %12s\n", "mean loss", "t < T/4", "t >= T/4");
  bool finite = true;
  for (int m = 0; m < models; ++m) {
    double a = 0, b = 0;
    for (int t = 0; t < T; ++t) (t < T / 4 ? a : b) += mean[m][t];
    a /= T / 4, b /= T - T / 4;
    finite = finite && std::isfinite(a) && std::isfinite(b);
    std::printf("%-18s %12.3f %12.3f\n", model_names[m], a, b);
  }
  if (!csv.empty()) std::printf("per-step losses: %s\n", csv.c_str());
  return finite ? 0 : 1;
}
