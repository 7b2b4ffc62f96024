// SPDX-License-Identifier: MIT
/// \file
/// The backward pass (docs/backward.md) on float inputs: chunkwise_backward against the
/// chunkwise forward of the same rule and against recurrent_backward, one and two threads,
/// next to the 1024^3 Eigen GEMM row (bench_support.hpp), so that every ratio comes from one
/// run. Modes (flags read before Google Benchmark sees the rest):
///
///   (none)    GatedDelta at B=1 T=8192 H=16 K=V=128 C=64: chunkwise forward, chunkwise_backward
///             (threads 1 and 2) and recurrent_backward (threads 1) + gemm_1024
///   --rules   every linear rule at B=1 T=4096 H=8 K=V=128 C=64: chunkwise forward and
///             chunkwise_backward, one thread + gemm_1024
///   --smoke   tiny shape, two iterations per row (the ctest `bench_backward_smoke`)
///
/// Results go to <build>/bench-results/backward.json (rules: backward_rules.json) unless
/// --benchmark_out is given; a summary with the ratios is printed at the end.

#include "bench_support.hpp"

#include <exception>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace linattn::bench;

/// What a row runs.
enum class pass { forward, backward_chunkwise, backward_recurrent };

const char* pass_name(pass p) {
  switch (p) {
    case pass::forward: return "chunkwise_forward";
    case pass::backward_chunkwise: return "chunkwise_backward";
    case pass::backward_recurrent: return "recurrent_backward";
  }
  return "?";
}

/// Useful FLOPs of one call per head (L = T), times B*H heads; exponentials not counted.
///   forward (chunkwise)   as bench_forms.cpp: additive 2 L C (K + V) + 4 L K V;
///                         Householder L (6 K V + 6 C K + 4 C V + C^2 / 3)
///   backward              the products of the reverse pass only (what recomputes forward
///                         quantities is not counted): additive L (8 K V + 3 C K + 2 C V) (state
///                         write, inter-chunk read and their gradients; causal scores, dV, dP,
///                         dQ, dK); Householder L (12 K V + 5 C K + 4 C V) (adds the corrections'
///                         [dO; dX] H0^T and dH0 halves, M^T dU, dY U^T, (dG + dG^T) K)
/// Both backward forms count the same work, so GFLOP/s compare their speeds.
double useful_flops(pass p, bool householder, const shape& s) {
  const double L = double(s.T), K = double(s.K), V = double(s.V), C = double(std::min(s.C, s.T));
  double per_head = 0;
  if (p == pass::forward)
    per_head = householder ? L * (6 * K * V + 6 * C * K + 4 * C * V + C * C / 3) : 2 * L * C * (K + V) + 4 * L * K * V;
  else
    per_head = householder ? L * (12 * K * V + 5 * C * K + 4 * C * V) : L * (8 * K * V + 3 * C * K + 2 * C * V);
  return per_head * double(s.B * s.H);
}

/// Random inputs of one shape (the distributions of bench_forms.cpp) and the backward's
/// buffers: dL/d out ~ N(0, 1) and one gradient buffer per input.
struct data : common_inputs {
  std::vector<float> dout;
  std::vector<float> dq, dk, dv, dg_scalar, dg_vector, dbeta;
};

data& data_for(const shape& s) {
  static data d;
  if (d.drawn_for(s)) return d;
  std::mt19937 rng(20240611u);
  d.draw(s, rng);
  fill_normal(d.dout, s.B * s.T * s.H * s.V, rng, [](float z) { return z; });
  d.dq.assign(d.q.size(), 0.0f), d.dk.assign(d.k.size(), 0.0f), d.dv.assign(d.v.size(), 0.0f);
  d.dg_scalar.assign(d.g_scalar.size(), 0.0f), d.dg_vector.assign(d.g_vector.size(), 0.0f);
  d.dbeta.assign(d.beta.size(), 0.0f);
  return d;
}

template <class Rule>
typename Rule::template inputs<float> inputs_of(const data& d) {
  const shape& s = d.s;
  const auto q = la::view(d.q.data(), s.B, s.T, s.H, s.K), k = la::view(d.k.data(), s.B, s.T, s.H, s.K);
  const auto v = la::view(d.v.data(), s.B, s.T, s.H, s.V);
  const auto g = la::view(d.g_scalar.data(), s.B, s.T, s.H);
  const auto gv = la::view(d.g_vector.data(), s.B, s.T, s.H, s.K);
  const auto beta = la::view(d.beta.data(), s.B, s.T, s.H);
  if constexpr (std::is_same_v<Rule, la::Hebbian> || std::is_same_v<Rule, la::NLMS>) return {.q = q, .k = k, .v = v};
  else if constexpr (std::is_same_v<Rule, la::ScalarDecay>) return {.q = q, .k = k, .v = v, .g = g};
  else if constexpr (std::is_same_v<Rule, la::VectorDecay>) return {.q = q, .k = k, .v = v, .g = gv};
  else if constexpr (std::is_same_v<Rule, la::Delta>) return {.q = q, .k = k, .v = v, .beta = beta};
  else if constexpr (std::is_same_v<Rule, la::GatedDelta>) return {.q = q, .k = k, .v = v, .g = g, .beta = beta};
  else if constexpr (std::is_same_v<Rule, la::KDA>) return {.q = q, .k = k, .v = v, .g = gv, .beta = beta};
  else return {.q = q, .k = k, .v = v, .delta = beta};  // Longhorn
}

template <class Rule>
la::gradients_t<Rule, float> gradients_of(data& d) {
  const shape& s = d.s;
  la::gradients_t<Rule, float> gr{};
  gr.dq = la::view(d.dq.data(), s.B, s.T, s.H, s.K);
  gr.dk = la::view(d.dk.data(), s.B, s.T, s.H, s.K);
  gr.dv = la::view(d.dv.data(), s.B, s.T, s.H, s.V);
  if constexpr (Rule::decay == la::decay_kind::scalar) gr.dg = la::view(d.dg_scalar.data(), s.B, s.T, s.H);
  if constexpr (Rule::decay == la::decay_kind::vector) gr.dg = la::view(d.dg_vector.data(), s.B, s.T, s.H, s.K);
  if constexpr (std::is_same_v<Rule, la::Longhorn>) gr.ddelta = la::view(d.dbeta.data(), s.B, s.T, s.H);
  else if constexpr (std::is_same_v<Rule, la::Delta> || std::is_same_v<Rule, la::GatedDelta> ||
                     std::is_same_v<Rule, la::KDA>)
    gr.dbeta = la::view(d.dbeta.data(), s.B, s.T, s.H);
  return gr;
}

template <class Rule>
void bench_pass(benchmark::State& state, pass p, const shape& s, double flops) {
  data& d = data_for(s);
  const auto in = inputs_of<Rule>(d);
  const auto gr = gradients_of<Rule>(d);
  const auto dout = la::view(d.dout.data(), s.B, s.T, s.H, s.V);
  la::backward_options<float> opt;
  opt.chunk_size = s.C;
  opt.threads = s.threads;
  std::vector<float>* result = p == pass::forward ? &d.out : &d.dk;
  std::fill(result->begin(), result->end(), std::numeric_limits<float>::quiet_NaN());
  for (auto _ : state) {
    try {
      switch (p) {
        case pass::forward:
          la::chunkwise_forward<Rule>(in, la::view(d.out.data(), s.B, s.T, s.H, s.V), opt);
          break;
        case pass::backward_chunkwise: la::chunkwise_backward<Rule>(in, dout, gr, opt); break;
        case pass::backward_recurrent: la::recurrent_backward<Rule>(in, dout, gr, opt); break;
      }
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      return;
    }
    benchmark::DoNotOptimize(result->data());
    benchmark::ClobberMemory();
  }
  if (!all_finite(*result)) return state.SkipWithError("non-finite or unwritten result");
  set_counters(state, double(s.B * s.T), flops);
}

struct row_info {
  std::string rule;  // empty for the GEMM row
  pass p = pass::forward;
  shape s;
  double flops = 0;
  bool real_time = false;
};

std::map<std::string, row_info>& registry() {
  static std::map<std::string, row_info> rows;
  return rows;
}
std::vector<std::string>& order() {
  static std::vector<std::string> names;
  return names;
}

std::string row_name(const std::string& rule, pass p, const shape& s) {
  return rule + "/" + pass_name(p) + "/T:" + std::to_string(s.T) + "/H:" + std::to_string(s.H) +
         "/K:" + std::to_string(s.K) + "/C:" + std::to_string(s.C) + "/threads:" + std::to_string(s.threads);
}

/// Rows on one thread by that thread's CPU time, on more by wall time (bench_forms.cpp).
template <class Rule>
void add(pass p, const shape& s, int repetitions, int iterations = 0) {
  const std::string name = row_name(Rule::name, p, s);
  const bool householder = std::is_same_v<typename Rule::family, la::householder_family>;
  const double flops = useful_flops(p, householder, s);
  registry()[name] = row_info{Rule::name, p, s, flops, s.threads > 1};
  order().push_back(name);
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [p, s, flops](benchmark::State& st) {
    bench_pass<Rule>(st, p, s, flops);
  });
  b->Unit(benchmark::kMillisecond);
  if (s.threads > 1) b->UseRealTime();
  if (iterations > 0) b->Iterations(iterations);
  if (repetitions > 0)
    b->Repetitions(repetitions)->DisplayAggregatesOnly()->ComputeStatistics(
        "min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
}

void add_gemm(int repetitions, int iterations = 0) {
  registry()["gemm_1024"] = row_info{"", pass::forward, shape{}, gemm_flops, false};
  order().push_back("gemm_1024");
  auto* b = benchmark::RegisterBenchmark("gemm_1024", bench_gemm);
  b->Unit(benchmark::kMillisecond);
  if (iterations > 0) b->Iterations(iterations);
  if (repetitions > 0)
    b->Repetitions(repetitions)->DisplayAggregatesOnly()->ComputeStatistics(
        "min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
}

template <class Rule>
void add_forward_backward(shape s, int reps, int iters = 0) {
  s.threads = 1;
  add<Rule>(pass::forward, s, reps, iters);
  add<Rule>(pass::backward_chunkwise, s, reps, iters);
}

enum class mode { main_job, rules, smoke };

void register_all(mode m) {
  using la::Hebbian, la::ScalarDecay, la::VectorDecay, la::Delta, la::GatedDelta, la::Longhorn, la::NLMS, la::KDA;
  if (m == mode::main_job) {
    shape s{1, 8192, 16, 128, 128, 64};
    add_forward_backward<GatedDelta>(s, 3);
    add<GatedDelta>(pass::backward_recurrent, s, 3, 1);
    s.threads = 2;
    add<GatedDelta>(pass::backward_chunkwise, s, 3);
    add_gemm(3);
  } else if (m == mode::rules) {
    const shape s{1, 4096, 8, 128, 128, 64};
    add_forward_backward<Hebbian>(s, 3);
    add_forward_backward<ScalarDecay>(s, 3);
    add_forward_backward<VectorDecay>(s, 3);
    add_forward_backward<Delta>(s, 3);
    add_forward_backward<GatedDelta>(s, 3);
    add_forward_backward<Longhorn>(s, 3);
    add_forward_backward<NLMS>(s, 3);
    add_forward_backward<KDA>(s, 3);
    add_gemm(3);
  } else {
    // T not a multiple of C, K != V: every code path, in milliseconds.
    shape s{2, 72, 2, 16, 24, 16};
    const auto all = [&]<class Rule>() {
      add_forward_backward<Rule>(s, 0, 2);
      add<Rule>(pass::backward_recurrent, s, 0, 2);
    };
    all.template operator()<Hebbian>();
    all.template operator()<ScalarDecay>();
    all.template operator()<VectorDecay>();
    all.template operator()<Delta>();
    all.template operator()<GatedDelta>();
    all.template operator()<Longhorn>();
    all.template operator()<NLMS>();
    all.template operator()<KDA>();
    s.threads = 2;
    add<GatedDelta>(pass::backward_chunkwise, s, 0, 2);
    add_gemm(0, 1);
  }
}

/// The summary: per row ms, tokens/s, GFLOP/s and % of GEMM; then per rule and shape the
/// ratios the backward is judged by (backward / forward, recurrent_backward / chunkwise_backward,
/// one thread / two threads), from medians and from the fastest repetitions.
class summary_reporter : public median_reporter {
 public:
  summary_reporter()
      : median_reporter([](const std::string& n) { return registry().count(n) && registry().at(n).real_time; }) {}

 private:
  double gflops(const std::string& name) const {
    const double t = seconds(name);
    return t > 0 ? registry().at(name).flops / t * 1e-9 : 0;
  }

  void summary() override {
    const double gemm = gflops("gemm_1024");
    line("\nSummary (threads=1: CPU time, threads>1: wall time; median of the repetitions; %%GEMM = useful"
         " GFLOP/s / gemm_1024 GFLOP/s)");
    line("%-12s %-19s %6s %4s %4s %8s %10s %11s %8s %6s", "rule", "pass", "T", "H", "C", "threads", "ms", "tokens/s",
         "GFLOP/s", "%GEMM");
    for (const std::string& name : order()) {
      const row_info& i = registry().at(name);
      if (i.rule.empty() || seconds(name) == 0) continue;
      const double t = seconds(name);
      line("%-12s %-19s %6td %4td %4td %8d %10.2f %11.0f %8.2f %6s", i.rule.c_str(), pass_name(i.p), i.s.T, i.s.H,
           i.s.C, i.s.threads, t * 1e3, double(i.s.B * i.s.T) / t, gflops(name),
           gemm > 0 ? fixed(100 * gflops(name) / gemm, "%.0f").c_str() : "-");
    }
    if (gemm > 0) line("%-12s %-19s %6s %4s %4s %8d %10.2f %11s %8.2f %6s", "gemm_1024", "eigen", "-", "-", "-", 1,
                       seconds("gemm_1024") * 1e3, "-", gemm, "100");
    line("\nRatios (median | fastest repetition)");
    for (const std::string& name : order()) {
      const row_info& i = registry().at(name);
      if (i.rule.empty() || i.p != pass::backward_chunkwise || seconds(name) == 0) continue;
      shape s = i.s;
      const auto ratio = [&](const std::string& a, const std::string& b, const char* what) {
        if (seconds(a) == 0 || seconds(b) == 0) return;
        line("%-12s T:%td H:%td C:%td  %-44s %6.2fx | %6.2fx", i.rule.c_str(), s.T, s.H, s.C, what,
             seconds(a) / seconds(b), fastest(a) / fastest(b));
      };
      if (i.s.threads == 1) {
        ratio(name, row_name(i.rule, pass::forward, s), "chunkwise_backward / chunkwise forward");
        ratio(row_name(i.rule, pass::backward_recurrent, s), name, "recurrent_backward / chunkwise_backward");
      } else {
        shape one = s;
        one.threads = 1;
        const std::string what = "chunkwise_backward 1 thread / " + std::to_string(s.threads) + " threads";
        ratio(row_name(i.rule, pass::backward_chunkwise, one), name, what.c_str());
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  mode m = mode::main_job;
  command_line cli(argc, argv, [&](std::string_view a) {
    if (a == "--rules") return m = mode::rules, true;
    if (a == "--smoke") return m = mode::smoke, true;
    return false;
  });
  const char* file = m == mode::rules ? "backward_rules.json" : m == mode::smoke ? "" : "backward.json";
  if (!cli.initialize(file, m != mode::smoke)) return 1;
  register_all(m);
  benchmark::AddCustomContext("linattn_mode", m == mode::rules ? "rules" : m == mode::smoke ? "smoke" : "main");
  summary_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
