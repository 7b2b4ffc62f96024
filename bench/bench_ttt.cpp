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
/// Counters: tokens_per_s and gflops from MATH.md §6.4-§6.5 per head: primal 6 L D^2
/// (matrix-vector), dual L (6 D^2 + 6 b D) (block products); LayerNorm work is not counted.
/// A summary prints each row's median time and its speed-up over the primal form.

#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include <linattn/linattn.hpp>

namespace {

namespace la = linattn;
using la::index_t;

enum class form { primal, dual, parallel };

const char* form_name(form f) {
  switch (f) {
    case form::primal: return "primal";
    case form::dual: return "dual";
    case form::parallel: return "parallel";
  }
  return "?";
}

struct shape {
  index_t B = 1, T = 4096, H = 8, D = 64, b = 16, C = 64;
};

/// Useful FLOPs of one call (MATH.md §6.4-§6.5), times B*H heads.
double useful_flops(form f, const shape& s) {
  const double L = double(s.T), D = double(s.D), b = double(s.b);
  const double per_head = f == form::primal ? 6 * L * D * D : L * (6 * D * D + 6 * b * D);
  return per_head * double(s.B * s.H);
}

/// Random inputs (fixed seed): q, k, v ~ N(0, 1); eta = sigmoid(N(0, 1)) / D; LayerNorm
/// weight 1, bias 0; W0 ~ N(0, 0.02^2) (the official initialisation), b0 = 0.
struct data {
  shape s;
  std::vector<float> q, k, v, eta, gam, bet, w0, out;
  explicit data(const shape& sh) : s(sh) {
    std::mt19937 rng(20241122u);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const auto fill = [&](std::vector<float>& x, index_t n, auto f) {
      x.resize(static_cast<std::size_t>(n));
      for (float& e : x) e = f(normal(rng));
    };
    const index_t tokens = s.B * s.T * s.H;
    const auto same = [](float z) { return z; };
    fill(q, tokens * s.D, same);
    fill(k, tokens * s.D, same);
    fill(v, tokens * s.D, same);
    fill(eta, tokens, [&](float z) { return 1.0f / (1.0f + std::exp(-z)) / float(s.D); });
    fill(w0, s.B * s.H * s.D * s.D, [](float z) { return 0.02f * z; });
    gam.assign(static_cast<std::size_t>(s.H * s.D), 1.0f);
    bet.assign(static_cast<std::size_t>(s.H * s.D), 0.0f);
    out.assign(static_cast<std::size_t>(tokens * s.D), 0.0f);
  }
};

void set_counters(benchmark::State& state, double tokens, double flops) {
  const double it = double(state.iterations());
  if (tokens > 0) state.counters["tokens_per_s"] = benchmark::Counter(it * tokens, benchmark::Counter::kIsRate);
  state.counters["gflops"] = benchmark::Counter(it * flops * 1e-9, benchmark::Counter::kIsRate);
}

void bench_form(benchmark::State& state, form f, const shape& s) {
  static std::map<std::string, data> cache;  // inputs per shape, shared by the forms
  const std::string key = std::to_string(s.B) + "/" + std::to_string(s.T) + "/" + std::to_string(s.H) + "/" +
                          std::to_string(s.D);
  data& d = cache.try_emplace(key, s).first->second;
  la::TTTLinear::inputs<float> in{.q = la::view(d.q.data(), s.B, s.T, s.H, s.D),  // [B, T, H, D]
                                  .k = la::view(d.k.data(), s.B, s.T, s.H, s.D),
                                  .v = la::view(d.v.data(), s.B, s.T, s.H, s.D),
                                  .eta = la::view(d.eta.data(), s.B, s.T, s.H),      // [B, T, H]
                                  .ln_weight = la::view(d.gam.data(), s.H, s.D),     // [H, D]
                                  .ln_bias = la::view(d.bet.data(), s.H, s.D)};
  in.mini_batch = s.b;
  const auto out = la::view(d.out.data(), s.B, s.T, s.H, s.D);
  la::options<float> opt;
  opt.chunk_size = s.C;
  opt.threads = 1;
  opt.initial_state = la::view(static_cast<const float*>(d.w0.data()), s.B, s.H, s.D, s.D);
  std::fill(d.out.begin(), d.out.end(), std::numeric_limits<float>::quiet_NaN());
  for (auto _ : state) {
    try {
      switch (f) {
        case form::primal: la::recurrent_forward<la::TTTLinear>(in, out, opt); break;
        case form::dual: la::chunkwise_forward<la::TTTLinear>(in, out, opt); break;
        case form::parallel: la::parallel_forward<la::TTTLinear>(in, out, opt); break;
      }
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      return;
    }
    benchmark::DoNotOptimize(d.out.data());
    benchmark::ClobberMemory();
  }
  if (!std::all_of(d.out.begin(), d.out.end(), [](float x) { return std::isfinite(x); })) {
    state.SkipWithError("non-finite or unwritten output");
    return;
  }
  set_counters(state, double(s.B * s.T), useful_flops(f, s));
}

void bench_gemm(benchmark::State& state) {
  const index_t n = 1024;
  const Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n);
  Eigen::MatrixXf c(n, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 0, 2.0 * double(n) * double(n) * double(n));
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
  std::string name = "TTTLinear/" + std::string(form_name(f)) + "/T:" + std::to_string(s.T) + "/D:" +
                     std::to_string(s.D) + "/b:" + std::to_string(s.b);
  if (f == form::dual) name += "/C:" + std::to_string(s.C);
  name += "/threads:1";
  rows().push_back({name, {f, s}});
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [f, s](benchmark::State& st) { bench_form(st, f, s); });
  b->Unit(benchmark::kMillisecond);
  if (iterations > 0) b->Iterations(iterations);
  if (repetitions > 0) b->Repetitions(repetitions)->DisplayAggregatesOnly();
}

void register_all(bool smoke) {
  const shape s = smoke ? shape{2, 40, 2, 8, 4, 8} : shape{};
  const int it = smoke ? 2 : 0, reps = smoke ? 0 : 5;
  add(form::primal, s, it, reps);
  for (index_t c : {s.b, s.C}) {
    shape t = s;
    t.C = c;
    add(form::dual, t, it, reps);
  }
  add(form::parallel, s, it, reps);
  auto* g = benchmark::RegisterBenchmark("gemm_1024", bench_gemm);
  g->Unit(benchmark::kMillisecond);
  if (smoke) g->Iterations(1);
  else g->Repetitions(reps)->DisplayAggregatesOnly();
}

/// Console output plus a summary: median ms per row (CPU time: all rows run on one thread),
/// tokens/s, GFLOP/s and the speed-up over the primal form.
class summary_reporter : public benchmark::ConsoleReporter {
 public:
  using ConsoleReporter::ConsoleReporter;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.iterations <= 0) continue;
      const std::string name = r.run_name.function_name;
      const double t = r.cpu_accumulated_time / double(r.iterations);
      if (r.run_type == Run::RT_Iteration) all_[name].push_back(t);
      else if (r.aggregate_name == "median") median_[name] = t;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    const auto secs = [&](const std::string& n) {
      if (auto m = median_.find(n); m != median_.end()) return m->second;
      auto it = all_.find(n);
      if (it == all_.end()) return 0.0;
      auto v = it->second;
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double primal = secs(rows().front().first);
    char buf[256];
    std::snprintf(buf, sizeof buf, "\nSummary (median CPU time, options::threads = 1)\n%-52s %10s %11s %8s %10s\n",
                  "row", "ms", "tokens/s", "GFLOP/s", "vs primal");
    GetOutputStream() << buf;
    for (const auto& [name, r] : rows()) {
      const double t = secs(name);
      if (t <= 0) continue;
      std::snprintf(buf, sizeof buf, "%-52s %10.2f %11.0f %8.2f %9.2fx\n", name.c_str(), t * 1e3,
                    double(r.s.B * r.s.T) / t, useful_flops(r.f, r.s) / t * 1e-9, primal > 0 ? primal / t : 0.0);
      GetOutputStream() << buf;
    }
    if (const double g = secs("gemm_1024"); g > 0) {
      std::snprintf(buf, sizeof buf, "%-52s %10.2f %11s %8.2f\n", "gemm_1024 (Eigen, 1 thread)", g * 1e3, "-",
                    2.0 * 1024 * 1024 * 1024 / g * 1e-9);
      GetOutputStream() << buf;
    }
  }

 private:
  std::map<std::string, std::vector<double>> all_;
  std::map<std::string, double> median_;
};

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false, out_given = false, format_given = false, listing = false, interleave_given = false;
  std::vector<std::string> args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--smoke") {
      smoke = true;
      continue;
    }
    args.emplace_back(a);
    out_given = out_given || a.starts_with("--benchmark_out=");
    format_given = format_given || a.starts_with("--benchmark_out_format=");
    listing = listing || a.starts_with("--benchmark_list_tests");
    interleave_given = interleave_given || a.starts_with("--benchmark_enable_random_interleaving");
  }
  if (!out_given && !listing && !smoke) {
    const std::filesystem::path dir = LINATTN_BENCH_RESULTS_DIR;
    std::filesystem::create_directories(dir);
    args.push_back("--benchmark_out=" + (dir / "ttt.json").string());
  }
  if (!format_given) args.push_back("--benchmark_out_format=json");
  if (!interleave_given && !smoke) args.push_back("--benchmark_enable_random_interleaving=true");
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  int cargc = static_cast<int>(cargs.size());
  cargs.push_back(nullptr);

  benchmark::Initialize(&cargc, cargs.data());
  if (benchmark::ReportUnrecognizedArguments(cargc, cargs.data())) return 1;
  register_all(smoke);
  benchmark::AddCustomContext("linattn_mode", smoke ? "ttt smoke" : "ttt");
  benchmark::AddCustomContext("linattn_shape", smoke ? "B=2 T=40 H=2 D=8 b=4" : "B=1 T=4096 H=8 D=64 b=16");
  summary_reporter reporter(isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_ColorTabular
                                                  : benchmark::ConsoleReporter::OO_Tabular);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
