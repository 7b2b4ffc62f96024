// SPDX-License-Identifier: MIT
/// \file
/// What the benchmark executables share: the forms and their names, the row shape, the
/// counters, the reference GEMM row, the random inputs' helpers, the median-keeping console
/// reporter and the command line (our flags, then Google Benchmark's with the defaults of
/// bench/README.md: JSON into bench/results/, repetitions in random order).
#pragma once

#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include <linattn/linattn.hpp>

namespace linattn::bench {

namespace la = linattn;
using la::index_t;

/// The three forms (for TTT-Linear: recurrent = primal, chunkwise = dual).
enum class form { recurrent, parallel, chunkwise };

inline const char* form_name(form f) {
  switch (f) {
    case form::recurrent: return "recurrent";
    case form::parallel: return "parallel";
    case form::chunkwise: return "chunkwise";
  }
  return "?";
}

/// Sizes of one row and options::threads. q, k: [B, T, H, K]; v, out: [B, T, H, V] (HV = H);
/// C = chunk (tile) size; b = TTT mini-batch size.
struct shape {
  index_t B = 1, T = 4096, H = 8, K = 128, V = 128, C = 64;
  int threads = 1;
  index_t b = 16;
};

/// Calls the form f of Rule (`in`: the rule's inputs of any element type).
template <class Rule, class In, class Out>
void run_form(form f, const In& in, const Out& out, const la::options<float>& opt) {
  switch (f) {
    case form::recurrent: la::recurrent_forward<Rule>(in, out, opt); break;
    case form::parallel: la::parallel_forward<Rule>(in, out, opt); break;
    case form::chunkwise: la::chunkwise_forward<Rule>(in, out, opt); break;
  }
}

inline float log_sigmoid(float x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }

/// x = n values f(z), z ~ N(0, 1) drawn from rng.
template <class F>
void fill_normal(std::vector<float>& x, index_t n, std::mt19937& rng, F f) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  x.resize(static_cast<std::size_t>(n));
  for (float& e : x) e = f(normal(rng));
}

/// Rows of length `len` of x scaled to unit L2 norm.
inline void normalise_rows(std::vector<float>& x, index_t len) {
  for (std::size_t i = 0; i < x.size(); i += std::size_t(len)) {
    float* row = x.data() + i;
    float n2 = 0;
    for (index_t j = 0; j < len; ++j) n2 += row[j] * row[j];
    const float inv = 1.0f / std::sqrt(n2);
    for (index_t j = 0; j < len; ++j) row[j] *= inv;
  }
}

/// The inputs every CPU benchmark draws, in this order from its generator: q, k ~ N(0,1) with
/// k L2-normalised per token, v ~ N(0,1), log gates logsigmoid(N(0,1) + 2) / 16 < 0 (mean
/// ~ -0.011; scalar and per key), beta = sigmoid(N(0,1)) (delta-rule step, Longhorn's delta);
/// out zeroed. HV = H.
struct common_inputs {
  shape s;
  std::vector<float> q, k;      // [B, T, H, K]
  std::vector<float> v, out;    // [B, T, H, V]
  std::vector<float> g_scalar;  // [B, T, H]
  std::vector<float> g_vector;  // [B, T, H, K]
  std::vector<float> beta;      // [B, T, H]

  /// Whether they were drawn for the sizes of s.
  bool drawn_for(const shape& o) const {
    return !q.empty() && o.B == s.B && o.T == s.T && o.H == s.H && o.K == s.K && o.V == s.V;
  }
  /// Draws them for the sizes of `shape_` from rng, which the caller may go on drawing from.
  void draw(const shape& shape_, std::mt19937& rng) {
    s = shape_;
    const index_t tokens = s.B * s.T * s.H;
    const auto same = [](float z) { return z; };
    const auto gate = [](float z) { return log_sigmoid(z + 2.0f) / 16.0f; };
    fill_normal(q, tokens * s.K, rng, same);
    fill_normal(k, tokens * s.K, rng, same);
    fill_normal(v, tokens * s.V, rng, same);
    fill_normal(g_scalar, tokens, rng, gate);
    fill_normal(g_vector, tokens * s.K, rng, gate);
    fill_normal(beta, tokens, rng, [](float z) { return 1.0f / (1.0f + std::exp(-z)); });
    normalise_rows(k, s.K);
    out.assign(static_cast<std::size_t>(tokens * s.V), 0.0f);
  }
};

/// Every output written and finite, or the timing means nothing (float or 16-bit outputs).
template <class E>
bool all_finite(const std::vector<E>& x) {
  return std::all_of(x.begin(), x.end(), [](E e) { return std::isfinite(static_cast<float>(e)); });
}

/// tokens_per_s (when tokens > 0) and gflops, both per second of the row's time.
inline void set_counters(benchmark::State& state, double tokens, double flops) {
  const double it = double(state.iterations());
  if (tokens > 0) state.counters["tokens_per_s"] = benchmark::Counter(it * tokens, benchmark::Counter::kIsRate);
  state.counters["gflops"] = benchmark::Counter(it * flops * 1e-9, benchmark::Counter::kIsRate);
}

inline constexpr double gemm_flops = 2.0 * 1024.0 * 1024.0 * 1024.0;

/// Reference row: C = A B with A, B, C 1024 x 1024 fp32 (Eigen, one thread), compiled with the
/// same flags as the kernels, so every row's GFLOP/s reads as a share of it.
inline void bench_gemm(benchmark::State& state) {
  const index_t n = 1024;
  const Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n);
  Eigen::MatrixXf c(n, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, 0, gemm_flops);
}

inline std::string fixed(double x, const char* fmt) {
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, x);
  return buf;
}

/// Console reporter that keeps each row's seconds per iteration (the median aggregate with
/// repetitions, else the median of the runs) for a summary printed by `summary()` after the
/// last row. `wall(name)` says whether a row is timed by wall clock rather than CPU time.
class median_reporter : public benchmark::ConsoleReporter {
 public:
  median_reporter(std::function<bool(const std::string&)> wall = {}) :
      ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular), wall_(std::move(wall)) {}

  /// Google Benchmark's own row lines (every repetition and aggregate) instead of a progress
  /// line; they always go to the JSON file.
  void show_raw_rows(bool on) { raw_ = on; }

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      const std::string name = r.run_name.function_name;
      if (r.iterations <= 0) continue;
      const double total = wall_ && wall_(name) ? r.real_accumulated_time : r.cpu_accumulated_time;  // seconds
      if (r.run_type == Run::RT_Iteration) all_[name].push_back(total / double(r.iterations));
      else if (r.aggregate_name == "median") medians_[name] = total / double(r.iterations);
      else if (r.aggregate_name == "min") mins_[name] = total / double(r.iterations);
    }
    if (raw_) return ConsoleReporter::ReportRuns(runs);
    if (runs.empty() || !isatty(STDERR_FILENO)) return;
    // One progress line, rewritten per row (stderr, so a redirected stdout keeps only tables).
    std::fprintf(stderr, "\r\033[K[%zu] %s", ++rows_done_, runs.front().run_name.function_name.c_str());
    std::fflush(stderr);
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    if (!raw_ && isatty(STDERR_FILENO)) std::fprintf(stderr, "\r\033[K");
    summary();
  }

 protected:
  virtual void summary() {}

  /// Median seconds per iteration of a row, or 0 when it did not run.
  double seconds(const std::string& name) const {
    if (const auto m = medians_.find(name); m != medians_.end()) return m->second;
    const auto it = all_.find(name);
    if (it == all_.end()) return 0;
    std::vector<double> s = it->second;
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  }

  /// Fastest repetition of a row (seconds per iteration: the "min" aggregate when the row
  /// registers that statistic, as bench_forms.cpp's rows with repetitions do, else the fastest
  /// run), or 0 when it did not run.
  double fastest(const std::string& name) const {
    if (const auto m = mins_.find(name); m != mins_.end()) return m->second;
    const auto it = all_.find(name);
    return it == all_.end() || it->second.empty() ? 0 : *std::min_element(it->second.begin(), it->second.end());
  }

  void line(const char* fmt, auto... args) const {
    char buf[320];
    std::snprintf(buf, sizeof buf, fmt, args...);
    GetOutputStream() << buf << '\n';
  }

 private:
  std::function<bool(const std::string&)> wall_;
  std::map<std::string, std::vector<double>> all_;  // per iteration run
  std::map<std::string, double> medians_;           // median aggregates (repetitions)
  std::map<std::string, double> mins_;              // min aggregates (repetitions)
  bool raw_ = false;
  std::size_t rows_done_ = 0;
};

/// The command line: `ours(flag)` consumes the program's own flags (returns true); the rest
/// goes to Google Benchmark, plus --benchmark_out=<results>/<out_file> (unless given, listing,
/// or out_file is empty), JSON format and random interleaving of repetitions (when
/// `interleave` and not given). Returns false on an unknown Google Benchmark flag.
class command_line {
 public:
  template <class Ours>
  command_line(int argc, char** argv, Ours&& ours) : args_{argv[0]} {
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      if (ours(a)) continue;
      args_.emplace_back(a);
      out_given_ = out_given_ || a.starts_with("--benchmark_out=");
      format_given_ = format_given_ || a.starts_with("--benchmark_out_format=");
      listing_ = listing_ || a.starts_with("--benchmark_list_tests");
      interleave_given_ = interleave_given_ || a.starts_with("--benchmark_enable_random_interleaving");
    }
  }

  bool initialize(const std::string& out_file, bool interleave) {
    // Google Benchmark opens (truncates) the out file even when it only lists the rows.
    if (!out_given_ && !listing_ && !out_file.empty()) {
      const std::filesystem::path dir = LINATTN_BENCH_RESULTS_DIR;
      std::filesystem::create_directories(dir);
      args_.push_back("--benchmark_out=" + (dir / out_file).string());
    }
    if (!format_given_) args_.push_back("--benchmark_out_format=json");
    // Repetitions in random order: a slow phase of a shared machine spreads over all rows
    // instead of landing on a few.
    if (interleave && !interleave_given_) args_.push_back("--benchmark_enable_random_interleaving=true");
    for (std::string& a : args_) cargs_.push_back(a.data());
    int argc = static_cast<int>(cargs_.size());
    cargs_.push_back(nullptr);
    benchmark::Initialize(&argc, cargs_.data());
    return !benchmark::ReportUnrecognizedArguments(argc, cargs_.data());
  }

 private:
  std::vector<std::string> args_;
  std::vector<char*> cargs_;  // argv for Google Benchmark, alive as long as the program
  bool out_given_ = false, format_given_ = false, listing_ = false, interleave_given_ = false;
};

}  // namespace linattn::bench
