// SPDX-License-Identifier: MIT
/// \file
/// TTT-Linear: primal form (recurrent_forward) vs dual form (chunkwise_forward, and the
/// one-tile parallel_forward) side by side in one run, float inputs, options::threads = 1,
/// next to a 1024^3 fp32 Eigen GEMM. Modes (flags read before Google Benchmark sees the rest):
///
///   (none)    B=1 T=4096 H=8 D=64 b=16: primal, dual with tiles C in {16, 64}, parallel,
///             gemm_1024; 5 repetitions in random order -> bench/results/ttt.json
///   --smoke   tiny shape, two iterations per row (the ctest `bench_ttt_smoke`)
///
/// Counters: tokens_per_s and gflops from docs/math.md#ttt-forms per head: primal 6 L D^2
/// (matrix-vector), dual L (6 D^2 + 6 b D) (block products); LayerNorm work is not counted.
/// A summary prints each row's median time and its speed-up over the primal form.

#include "bench_support.hpp"

#include <exception>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace linattn::bench;

/// TTT's names of the forms: primal = recurrent_forward, dual = chunkwise_forward (tiles of
/// C tokens), parallel = parallel_forward (the dual form over one tile).
const char* ttt_name(form f) {
  return f == form::recurrent ? "primal" : f == form::chunkwise ? "dual" : "parallel";
}

/// The default shape: B=1 T=4096 H=8 D=K=V=64, tiles C=64, mini-batch b=16, one thread.
constexpr shape ttt_shape{1, 4096, 8, 64, 64, 64, 1, 16};

/// Useful FLOPs of one call (docs/math.md#ttt-forms), times B*H heads (D = K = V).
double useful_flops(form f, const shape& s) {
  const double L = double(s.T), D = double(s.K), b = double(s.b);
  const double per_head = f == form::recurrent ? 6 * L * D * D : L * (6 * D * D + 6 * b * D);
  return per_head * double(s.B * s.H);
}

/// Random inputs (fixed seed): q, k, v ~ N(0, 1); eta = sigmoid(N(0, 1)) / D; LayerNorm
/// weight 1, bias 0; W0 ~ N(0, 0.02^2) (the official initialisation), b0 = 0.
struct data {
  shape s;
  std::vector<float> q, k, v, eta, gam, bet, w0, out;
  explicit data(const shape& sh) : s(sh) {
    std::mt19937 rng(20241122u);
    const auto fill = [&](std::vector<float>& x, index_t n, auto f) { fill_normal(x, n, rng, f); };
    const index_t tokens = s.B * s.T * s.H;
    const auto same = [](float z) { return z; };
    fill(q, tokens * s.K, same);
    fill(k, tokens * s.K, same);
    fill(v, tokens * s.K, same);
    fill(eta, tokens, [&](float z) { return 1.0f / (1.0f + std::exp(-z)) / float(s.K); });
    fill(w0, s.B * s.H * s.K * s.K, [](float z) { return 0.02f * z; });
    gam.assign(static_cast<std::size_t>(s.H * s.K), 1.0f);
    bet.assign(static_cast<std::size_t>(s.H * s.K), 0.0f);
    out.assign(static_cast<std::size_t>(tokens * s.K), 0.0f);
  }
};

void bench_form(benchmark::State& state, form f, const shape& s) {
  static std::map<std::string, data> cache;  // inputs per shape, shared by the forms
  const std::string key = std::to_string(s.B) + "/" + std::to_string(s.T) + "/" + std::to_string(s.H) + "/" +
                          std::to_string(s.K);
  data& d = cache.try_emplace(key, s).first->second;
  la::TTTLinear::inputs<float> in{.q = la::view(d.q.data(), s.B, s.T, s.H, s.K),  // [B, T, H, D]
                                  .k = la::view(d.k.data(), s.B, s.T, s.H, s.K),
                                  .v = la::view(d.v.data(), s.B, s.T, s.H, s.K),
                                  .eta = la::view(d.eta.data(), s.B, s.T, s.H),      // [B, T, H]
                                  .ln_weight = la::view(d.gam.data(), s.H, s.K),     // [H, D]
                                  .ln_bias = la::view(d.bet.data(), s.H, s.K)};
  in.mini_batch = s.b;
  const auto out = la::view(d.out.data(), s.B, s.T, s.H, s.K);
  la::options<float> opt;
  opt.chunk_size = s.C;
  opt.threads = 1;
  opt.initial_state = la::view(static_cast<const float*>(d.w0.data()), s.B, s.H, s.K, s.K);
  std::fill(d.out.begin(), d.out.end(), std::numeric_limits<float>::quiet_NaN());
  for (auto _ : state) {
    try {
      run_form<la::TTTLinear>(f, in, out, opt);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      return;
    }
    benchmark::DoNotOptimize(d.out.data());
    benchmark::ClobberMemory();
  }
  if (!all_finite(d.out)) {
    state.SkipWithError("non-finite or unwritten output");
    return;
  }
  set_counters(state, double(s.B * s.T), useful_flops(f, s));
}

struct row {
  form f;
  shape s;
};
std::vector<std::pair<std::string, row>>& rows() {
  static std::vector<std::pair<std::string, row>> r;
  return r;
}

/// Row names: TTTLinear/<form>/T:<T>/D:<D>/b:<b>[/C:<tile>]/threads:1.
void add(form f, const shape& s, int iterations, int repetitions) {
  std::string name = "TTTLinear/" + std::string(ttt_name(f)) + "/T:" + std::to_string(s.T) + "/D:" +
                     std::to_string(s.K) + "/b:" + std::to_string(s.b);
  if (f == form::chunkwise) name += "/C:" + std::to_string(s.C);
  name += "/threads:1";
  rows().push_back({name, {f, s}});
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [f, s](benchmark::State& st) { bench_form(st, f, s); });
  b->Unit(benchmark::kMillisecond);
  if (iterations > 0) b->Iterations(iterations);
  if (repetitions > 0) b->Repetitions(repetitions)->DisplayAggregatesOnly();
}

void register_all(bool smoke) {
  const shape s = smoke ? shape{2, 40, 2, 8, 8, 8, 1, 4} : ttt_shape;
  const int it = smoke ? 2 : 0, reps = smoke ? 0 : 5;
  add(form::recurrent, s, it, reps);
  for (index_t c : {s.b, s.C}) {
    shape t = s;
    t.C = c;
    add(form::chunkwise, t, it, reps);
  }
  add(form::parallel, s, it, reps);
  auto* g = benchmark::RegisterBenchmark("gemm_1024", bench_gemm);
  g->Unit(benchmark::kMillisecond);
  if (smoke) g->Iterations(1);
  else g->Repetitions(reps)->DisplayAggregatesOnly();
}

/// Console output plus a summary: median ms per row (CPU time: all rows run on one thread),
/// tokens/s, GFLOP/s and the speed-up over the primal form.
class summary_reporter : public median_reporter {
  void summary() override {
    const double primal = seconds(rows().front().first);
    line("\nSummary (median CPU time, options::threads = 1)\n%-52s %10s %11s %8s %10s", "row", "ms", "tokens/s",
         "GFLOP/s", "vs primal");
    for (const auto& [name, r] : rows()) {
      const double t = seconds(name);
      if (t <= 0) continue;
      line("%-52s %10.2f %11.0f %8.2f %9.2fx", name.c_str(), t * 1e3, double(r.s.B * r.s.T) / t,
           useful_flops(r.f, r.s) / t * 1e-9, primal > 0 ? primal / t : 0.0);
    }
    if (const double g = seconds("gemm_1024"); g > 0)
      line("%-52s %10.2f %11s %8.2f", "gemm_1024 (Eigen, 1 thread)", g * 1e3, "-", gemm_flops / g * 1e-9);
  }
};

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  command_line cli(argc, argv, [&](std::string_view a) { return a == "--smoke" && (smoke = true); });
  if (!cli.initialize(smoke ? "" : "ttt.json", !smoke)) return 1;
  register_all(smoke);
  benchmark::AddCustomContext("linattn_mode", smoke ? "ttt smoke" : "ttt");
  benchmark::AddCustomContext("linattn_shape", smoke ? "B=2 T=40 H=2 D=8 b=4" : "B=1 T=4096 H=8 D=64 b=16");
  summary_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
