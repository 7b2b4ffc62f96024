// SPDX-License-Identifier: MIT
/// \file
/// Recurrent vs parallel vs chunkwise forms of the rules (Hebbian, ScalarDecay, VectorDecay,
/// Delta, GatedDelta, Longhorn, LonghornDiagonal, NLMS, KDA, RWKV7, mLSTM, Mamba, RLS, and DeltaProduct /
/// GatedDeltaProduct with n_h = product_steps) on float inputs, next to a 1024^3 fp32 Eigen GEMM so that GFLOP/s can be
/// compared within one run. Modes (flags read before Google Benchmark sees the rest):
///
///   (none)    main job: B=1 T=4096 H=8 K=V=128 C=64, every rule x form + gemm_1024
///   --sweep   T in {64, ..., 4096 (powers of 2), 16384}, K=V in {64, 128}, C in {16, 32, 64, 128},
///             H=4; softmax attention (online, C in {64, 128}) at every T and K
///   --delta   GatedDelta at B=1 T=8192 H=16 K=V=128, every form, C in {16, 32, 64, 128}
///   --threads GatedDelta and ScalarDecay at B=1 T=8192 H in {1, 2, 16}, 1 and 2 threads (wall time)
///   --decode  decode_step<GatedDelta> at B=1 H=16 K=V=128 next to copies of the state bytes, and
///             the serving rows: pool, verify_drafts / commit_drafts (B=1 and B=32), 1 and 2 threads
///   --smoke   tiny shape, two iterations per row (the ctest `bench_smoke`)
///
/// Results go to <build>/bench-results/forms.json (sweep: forms_sweep.json, delta:
/// gated_delta.json, threads: threads.json, decode: decode.json) unless --benchmark_out is
/// given; the console shows one progress line (--raw: Google Benchmark's rows), then the
/// summary tables and which form wins per rule. bench/results/ holds the reference runs that
/// bench/README.md quotes.

#include "bench_support.hpp"

#include <exception>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace linattn::bench;

/// Kinds of rules by their cost model.
enum class kind { additive, delta, softmax, selective_scan, rls };

template <class Rule>
constexpr kind kind_of() {
  if constexpr (std::is_same_v<typename Rule::family, linattn::householder_family> ||
                std::is_same_v<typename Rule::family, linattn::householder_product_family> ||
                std::is_same_v<typename Rule::family, linattn::dplr_family>)  // RWKV7: counted as the delta rule
    return kind::delta;
  else if constexpr (std::is_same_v<typename Rule::family, linattn::softmax_family>) return kind::softmax;
  else if constexpr (std::is_same_v<typename Rule::family, linattn::selective_scan_family>) return kind::selective_scan;
  else if constexpr (std::is_same_v<typename Rule::family, linattn::rls_family>) return kind::rls;
  else return kind::additive;
}

/// Whether the rule's state decays (mLSTM, which has no decay_kind, always forgets).
template <class Rule>
constexpr bool decays() {
  if constexpr (requires { Rule::decay; }) return Rule::decay != linattn::decay_kind::none;
  else return true;
}

/// Useful FLOPs of one call, docs/math.md#costs per head (L = T), times B*H heads. Additive family:
///   recurrent  4 L K V (Hebbian); 5 L K V with a decay (+ L K V to scale the state)
///   chunkwise  2 L C (K + V) + 4 L K V   (intra-chunk QK^T and PV, plus state read and write)
///   parallel   L^2 (K + V)               (the causal half of the dense 2 L^2 (K + V))
/// Delta family (Householder transitions):
///   recurrent  6 L K V (Delta, Longhorn); 7 L K V with a gate
///   chunkwise  L (6 K V + 6 C K + 4 C V + C^2 / 3)
///   parallel   L^2 (3 K + 2 V) + 6 L K V (causal Gram, triangular solve for [W U], causal
///              scores and their product with U~, and the three state products)
/// Softmax attention (the quadratic reference), every form: L^2 (K + V), the causal half of
/// the dense 2 L^2 (K + V) of docs/math.md#costs (scores Q K^T and their product with V).
/// Selective scan (Mamba), per state element and token: Delta A, the decay, the write and the
/// output term: recurrent and chunkwise 5 L K V (plus L K V exponentials); parallel
/// 5 L^2 K V / 2 (every pair s <= t).
/// RLS, every form: the Sherman-Morrison recurrence's 4 L K^2 + 6 L K V (P k, the rank-one
/// update of P, the prediction error, the state update and the output); the chunkwise form's
/// Cholesky and triangular solves and the parallel form's L K^3 are overhead, not counted.
/// Exponentials are not counted.
double useful_flops(form f, kind r, bool decays, const shape& s, index_t steps = 1) {
  const double L = double(s.T * steps), K = double(s.K), V = double(s.V);
  const double C = double(std::min(s.C, s.T));
  const bool delta_family = r == kind::delta;
  double per_head = 0;
  if (r == kind::softmax) return L * L * (K + V) * double(s.B * s.H);
  if (r == kind::selective_scan) return (f == form::parallel ? 2.5 * L : 5.0) * L * K * V * double(s.B * s.H);
  if (r == kind::rls) return (4 * K * K + 6 * K * V) * L * double(s.B * s.H);
  switch (f) {
    case form::recurrent: per_head = ((delta_family ? 6 : 4) + (decays ? 1 : 0)) * L * K * V; break;
    case form::chunkwise:
      per_head = delta_family ? L * (6 * K * V + 6 * C * K + 4 * C * V + C * C / 3)
                              : 2 * L * C * (K + V) + 4 * L * K * V;
      break;
    case form::parallel: per_head = delta_family ? L * L * (3 * K + 2 * V) + 6 * L * K * V : L * L * (K + V); break;
  }
  return per_head * double(s.B * s.H);
}

/// Householder steps per token of the DeltaProduct rows (their FLOPs: the delta rule's on
/// product_steps x T sub-steps; options::chunk_size counts sub-steps).
constexpr index_t product_steps = 2;

template <class Rule>
constexpr index_t steps_of() {
  return std::is_same_v<typename Rule::family, linattn::householder_product_family> ? product_steps : 1;
}

// ---- inputs ------------------------------------------------------------------------------

/// Random inputs of one size, shared by every rule and form of that size: the common ones
/// (bench_support.hpp), then these.
struct input_data : common_inputs {
  std::vector<float> a_low, b_low;  // [B, T, H, K]  RWKV7: a = -k (unit keys), b = k ⊙ sigmoid(N(0,1))
  std::vector<float> k_steps;   // [B, T, product_steps, H, K]  DeltaProduct: unit keys
  std::vector<float> v_steps;   // [B, T, product_steps, H, V]
  std::vector<float> beta_steps;  // [B, T, product_steps, H]
  std::vector<float> dt;          // [B, T, H, V]  Mamba's Delta before softplus: N(0,1) - 3 (Delta ~ 0.05)
  std::vector<float> rates;       // [H, V, K]     Mamba's A[d, n] = -(n + 1) exp(N(0,1) / 4) (S4D-real-like)
};

/// The inputs of shape s; regenerated only when the size changes (rows of one size are
/// registered next to each other).
input_data& inputs_for(const shape& s) {
  static input_data d;
  if (d.drawn_for(s)) return d;
  std::mt19937 rng(20240611u);
  d.draw(s, rng);
  const auto fill = [&](std::vector<float>& x, index_t n, auto f) { fill_normal(x, n, rng, f); };
  const index_t tokens = s.B * s.T * s.H;
  const auto same = [](float z) { return z; };
  fill(d.k_steps, tokens * product_steps * s.K, same);
  fill(d.v_steps, tokens * product_steps * s.V, same);
  fill(d.beta_steps, tokens * product_steps, [](float z) { return 1.0f / (1.0f + std::exp(-z)); });
  fill(d.dt, tokens * s.V, [](float z) { return z - 3.0f; });
  fill(d.rates, s.H * s.V * s.K, [](float z) { return -std::exp(z / 4.0f); });
  for (std::size_t i = 0; i < d.rates.size(); ++i) d.rates[i] *= float(i % std::size_t(s.K) + 1);
  normalise_rows(d.k_steps, s.K);  // unit-norm keys
  fill(d.b_low, tokens * s.K, [](float z) { return 1.0f / (1.0f + std::exp(-z)); });
  d.a_low.resize(d.k.size());
  for (std::size_t i = 0; i < d.k.size(); ++i) d.a_low[i] = -d.k[i], d.b_low[i] *= d.k[i];
  return d;
}

template <class Rule>
typename Rule::template inputs<float> make_inputs(const input_data& d) {
  const shape& s = d.s;
  const auto q = la::view(d.q.data(), s.B, s.T, s.H, s.K);  // [B, T, H, K]
  const auto k = la::view(d.k.data(), s.B, s.T, s.H, s.K);  // [B, T, H, K]
  const auto v = la::view(d.v.data(), s.B, s.T, s.H, s.V);  // [B, T, H, V]
  const auto g = la::view(d.g_scalar.data(), s.B, s.T, s.H);         // [B, T, H]
  const auto g_vec = la::view(d.g_vector.data(), s.B, s.T, s.H, s.K);  // [B, T, H, K]
  const auto beta = la::view(d.beta.data(), s.B, s.T, s.H);           // [B, T, H]
  if constexpr (std::is_same_v<Rule, la::Hebbian> || std::is_same_v<Rule, la::SoftmaxAttention> ||
                std::is_same_v<Rule, la::NLMS>)
    return {.q = q, .k = k, .v = v};
  else if constexpr (std::is_same_v<Rule, la::ScalarDecay> || std::is_same_v<Rule, la::RLS>)
    return {.q = q, .k = k, .v = v, .g = g};  // RLS: forgetting factor exp(g) ~ 0.99, ridge 1
  else if constexpr (std::is_same_v<Rule, la::VectorDecay>) return {.q = q, .k = k, .v = v, .g = g_vec};
  else if constexpr (std::is_same_v<Rule, la::Delta>) return {.q = q, .k = k, .v = v, .beta = beta};
  else if constexpr (std::is_same_v<Rule, la::GatedDelta>) return {.q = q, .k = k, .v = v, .g = g, .beta = beta};
  else if constexpr (std::is_same_v<Rule, la::KDA>) return {.q = q, .k = k, .v = v, .g = g_vec, .beta = beta};
  else if constexpr (std::is_same_v<Rule, la::RWKV7>)
    return {.q = q, .k = k, .v = v, .g = g_vec, .a = la::view(d.a_low.data(), s.B, s.T, s.H, s.K),
            .b = la::view(d.b_low.data(), s.B, s.T, s.H, s.K)};
  else if constexpr (std::is_same_v<Rule, la::mLSTM>) return {.q = q, .k = k, .v = v, .i = g, .f = beta};  // gates: any values
  else if constexpr (std::is_same_v<Rule, la::Mamba>)  // q = C, k = B, v = x; Delta = softplus(dt)
    return {.q = q, .k = k, .v = v, .dt = la::view(d.dt.data(), s.B, s.T, s.H, s.V),
            .A = la::view(d.rates.data(), s.H, s.V, s.K), .delta_softplus = true};
  else if constexpr (std::is_same_v<typename Rule::family, la::householder_product_family>) {
    const index_t n = product_steps;
    const auto ks = la::view(d.k_steps.data(), s.B, s.T, n, s.H, s.K);  // [B, T, n, H, K]
    const auto vs = la::view(d.v_steps.data(), s.B, s.T, n, s.H, s.V);  // [B, T, n, H, V]
    const auto bs = la::view(d.beta_steps.data(), s.B, s.T, n, s.H);    // [B, T, n, H]
    if constexpr (std::is_same_v<Rule, la::DeltaProduct>) return {.q = q, .k = ks, .v = vs, .beta = bs};
    else return {.q = q, .k = ks, .v = vs, .g = g, .beta = bs};
  }
  else return {.q = q, .k = k, .v = v, .delta = beta};  // Longhorn, LonghornDiagonal
}

// ---- benchmarks --------------------------------------------------------------------------

/// What the summary needs to know about a registered row, by benchmark name.
struct row_info {
  std::string rule;  // empty for the GEMM row
  form f = form::recurrent;
  shape s;
  double flops = 0;        // useful FLOPs per iteration
  bool real_time = false;  // timed by wall clock (threads > 1) rather than the thread's CPU time
};

std::map<std::string, row_info>& registry() {
  static std::map<std::string, row_info> rows;
  return rows;
}

/// Row names in registration order (the order of the summary tables).
std::vector<std::string>& order() {
  static std::vector<std::string> names;
  return names;
}

void add_row(const std::string& name, const row_info& info) {
  registry()[name] = info;
  order().push_back(name);
}

/// How a row calls the rule: float inputs; 16-bit q, k, v (bfloat16) with the gates and betas
/// in bfloat16 too or in float (fla's mixed precision; the state is float in all three); or
/// float inputs with options::normalize_qk (the cost of normalising q and k in the call).
enum class variant { f32, bf16, bf16_f32_gates, normalize_qk };

inline const char* variant_suffix(variant p) {
  switch (p) {
    case variant::f32: return "";
    case variant::bf16: return ":bf16";
    case variant::bf16_f32_gates: return ":bf16+f32g";
    case variant::normalize_qk: return ":normalize_qk";
  }
  return "";
}

/// GatedDelta's inputs in bfloat16 (q, k, v; g and beta in bfloat16 or float), rounded from
/// the float inputs of the same size; out in bfloat16.
struct gated_delta_16 {
  using X = Eigen::bfloat16;
  std::vector<X> q, k, v, g, beta, out;
  explicit gated_delta_16(const input_data& d) {
    const auto round = [](const std::vector<float>& x) { return std::vector<X>(x.begin(), x.end()); };
    q = round(d.q), k = round(d.k), v = round(d.v), g = round(d.g_scalar), beta = round(d.beta);
    out.assign(d.out.size(), X(0.0f));
  }
  la::GatedDelta::inputs<X> inputs(const input_data& d, bool float_gates) const {
    const shape& s = d.s;
    using coefficients = la::coefficient_view<X, 3>;
    const auto gates = [&](const std::vector<X>& x16, const std::vector<float>& x32) {
      return float_gates ? coefficients(la::view(x32.data(), s.B, s.T, s.H)) : coefficients(la::view(x16.data(), s.B, s.T, s.H));
    };
    return {.q = la::view(q.data(), s.B, s.T, s.H, s.K), .k = la::view(k.data(), s.B, s.T, s.H, s.K),
            .v = la::view(v.data(), s.B, s.T, s.H, s.V), .g = gates(g, d.g_scalar), .beta = gates(beta, d.beta)};
  }
};

/// Times one call: every output written and finite, or the row reports an error.
template <class Rule, class In, class E>
void time_form(benchmark::State& state, form f, const shape& s, double flops, const In& in, std::vector<E>& out_data,
               bool normalize_qk = false) {
  const auto out = la::view(out_data.data(), s.B, s.T, s.H, s.V);  // [B, T, H, V]
  la::options<float> opt;
  opt.chunk_size = s.C;
  opt.threads = s.threads;
  opt.normalize_qk = normalize_qk;
  std::fill(out_data.begin(), out_data.end(), E(std::numeric_limits<float>::quiet_NaN()));
  bool failed = false;
  for (auto _ : state) {
    try {
      run_form<Rule>(f, in, out, opt);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      failed = true;
      break;
    }
    benchmark::DoNotOptimize(out_data.data());
    benchmark::ClobberMemory();
  }
  if (failed) return;
  // Every output must be written and finite, or the timing means nothing.
  if (!all_finite(out_data)) {
    state.SkipWithError("non-finite or unwritten output");
    return;
  }
  set_counters(state, double(s.B * s.T), flops);
}

template <class Rule>
void bench_form(benchmark::State& state, form f, const shape& s, double flops, variant p) {
  input_data& d = inputs_for(s);
  if constexpr (std::is_same_v<Rule, la::GatedDelta>) {
    if (p == variant::bf16 || p == variant::bf16_f32_gates) {
      gated_delta_16 x(d);
      time_form<Rule>(state, f, s, flops, x.inputs(d, p == variant::bf16_f32_gates), x.out);
      return;
    }
  }
  time_form<Rule>(state, f, s, flops, make_inputs<Rule>(d), d.out, p == variant::normalize_qk);
}

// ---- decode -------------------------------------------------------------------------------

/// decode_step<GatedDelta> at B=1, one token, H=16, K=V=128: the state ([1, H, K, V] fp32,
/// 1 MiB) is read and written once per call at best. `states` distinct states are cycled
/// through: 1 keeps it in cache (one layer decoding alone), 256 (256 MiB, more than the L3)
/// makes every call fetch its state from memory, as a model with many layers does.
constexpr index_t decode_H = 16, decode_D = 128;
constexpr double decode_state_bytes = double(decode_H * decode_D * decode_D * sizeof(float));

/// How a decode row calls the library: `states` distinct states cycled through (contiguous
/// [1, H, K, V] each) or, with `pool`, slots 5.. of an [batch + 7, H, K, V] pool through
/// options::state_indices, for `batch` sequences; `drafts` > 0: verify_drafts of that many
/// draft tokens from the pool instead of one decode_step, keeping the state after each draft
/// token (`record` false) or the compact draft_record (true); `commit`: commit_drafts of all
/// the drafts from that record instead (verified once before the timing).
struct decode_setup {
  index_t states = 1;
  int threads = 1;
  bool pool = false;
  index_t drafts = 0;
  index_t batch = 1;
  bool record = false;
  bool commit = false;
};

void bench_decode(benchmark::State& state, const decode_setup& c) {
  const index_t H = decode_H, D = decode_D, per = H * D * D, T = std::max<index_t>(1, c.drafts), B = c.batch;
  const index_t slots = c.pool ? B + 7 : c.states;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t tokens = std::size_t(B * T * H);
  std::vector<float> q(tokens * D), k(tokens * D), v(tokens * D), out(tokens * D), g(tokens), beta(tokens);
  std::vector<float> s(static_cast<std::size_t>(slots * per));
  std::vector<float> drafts(c.record ? 0 : static_cast<std::size_t>(B * c.drafts * per));
  std::vector<float> rec_k(c.record ? tokens * D : 0), rec_u(rec_k.size()), rec_g(c.record ? tokens : 0);
  for (float& x : q) x = normal(rng);
  for (float& x : v) x = normal(rng);
  for (float& x : s) x = 0.01f * normal(rng);
  for (std::size_t th = 0; th < tokens; ++th) {
    float n2 = 0;
    for (index_t j = 0; j < D; ++j) n2 += (k[th * D + j] = normal(rng)) * k[th * D + j];
    for (index_t j = 0; j < D; ++j) k[th * D + j] /= std::sqrt(n2);
    g[th] = log_sigmoid(normal(rng) + 2.0f) / 16.0f;
    beta[th] = 1.0f / (1.0f + std::exp(-normal(rng)));
  }
  const la::GatedDelta::inputs<float> in{.q = la::view(q.data(), B, T, H, D), .k = la::view(k.data(), B, T, H, D),
                                         .v = la::view(v.data(), B, T, H, D), .g = la::view(g.data(), B, T, H),
                                         .beta = la::view(beta.data(), B, T, H)};
  la::options<float> opt;
  opt.threads = c.threads;
  std::vector<std::int32_t> slot(static_cast<std::size_t>(B));
  for (index_t n = 0; n < B; ++n) slot[std::size_t(n)] = std::int32_t(5 + n);
  if (c.pool) opt.state_indices = la::view(slot.data(), slot.size());
  const la::draft_record<float> rec{la::view(rec_k.data(), B, T, H, D), la::view(rec_u.data(), B, T, H, D),
                                    la::view(rec_g.data(), B, T, H, 1)};
  const std::vector<std::int32_t> accepted(static_cast<std::size_t>(B), std::int32_t(c.drafts));
  const auto o = la::view(out.data(), B, T, H, D);
  const auto pool = la::view(s.data(), slots, H, D, D);
  if (c.commit) la::verify_drafts<la::GatedDelta>(in, o, pool, rec, opt);
  index_t i = 0;
  for (auto _ : state) {
    if (c.commit) {
      la::commit_drafts(pool, rec, la::view(accepted.data(), accepted.size()), opt);
    } else if (c.drafts > 0 && c.record) {
      la::verify_drafts<la::GatedDelta>(in, o, pool, rec, opt);
    } else if (c.drafts > 0) {
      la::verify_drafts<la::GatedDelta>(in, o, pool, la::view(drafts.data(), B, c.drafts, H, D, D), opt);
    } else if (c.pool) {
      la::decode_step<la::GatedDelta>(in, o, pool, opt);
    } else {
      la::decode_step<la::GatedDelta>(in, o, la::view(s.data() + i * per, 1, H, D, D), opt);
      i = (i + 1) % c.states;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(s.data());
    benchmark::ClobberMemory();
  }
  state.counters["tokens_per_s"] = benchmark::Counter(double(state.iterations() * B * T), benchmark::Counter::kIsRate);
  state.counters["bytes_per_second"] =
      benchmark::Counter(2 * decode_state_bytes * double(B) * double(state.iterations()), benchmark::Counter::kIsRate);
}

/// STREAM-like copy of `bytes` per iteration (read + write = 2 * bytes moved), cycling through
/// `copies` distinct source/destination pairs (1: from cache; many: from memory).
void bench_copy(benchmark::State& state, double bytes, index_t copies) {
  const auto n = static_cast<index_t>(bytes / sizeof(float));
  std::vector<float> a(static_cast<std::size_t>(copies * n), 1.0f), b(static_cast<std::size_t>(copies * n), 2.0f);
  index_t i = 0;
  for (auto _ : state) {
    Eigen::Map<Eigen::VectorXf>(b.data() + i * n, n) = Eigen::Map<const Eigen::VectorXf>(a.data() + i * n, n);
    i = (i + 1) % copies;
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.counters["bytes_per_second"] = benchmark::Counter(2 * bytes * double(state.iterations()), benchmark::Counter::kIsRate);
}

/// The exponentials alone of Mamba's main-job rows: T H K V = 4096 * 8 * 128 * 128 float exp
/// (Eigen's vectorised exp, the one the selective-scan kernels use) over a [K, V] block of
/// non-positive arguments that stays in cache. Every exact form of the selective scan evaluates
/// at least this many (one distinct decay per token, state index and channel): the floor of
/// both its recurrent and its chunkwise rows (bench/README.md).
void bench_scan_exps(benchmark::State& state) {
  const index_t block = 128 * 128, blocks = 4096 * 8;
  std::mt19937 rng(3);
  std::vector<float> x, y(static_cast<std::size_t>(block));
  fill_normal(x, block, rng, [](float z) { return -std::abs(z); });
  for (auto _ : state)
    for (index_t i = 0; i < blocks; ++i) {
      Eigen::Map<Eigen::ArrayXf>(y.data(), block) = Eigen::Map<const Eigen::ArrayXf>(x.data(), block).exp();
      benchmark::DoNotOptimize(y.data());
      benchmark::ClobberMemory();
    }
}

/// Per-row run settings of a mode: min_time in seconds (0 = the flag's), fixed iterations
/// (0 = automatic) and repetitions (0 = the flag's; the summary takes their median).
struct run_settings {
  double min_time = 0;
  int iterations = 0;
  int repetitions = 0;
  bool wall = false;  // time every row by wall clock (thread scaling compares 1 with n threads)
};

/// Rows on one thread are timed by that thread's CPU time, which other processes on a shared
/// machine disturb less; rows on more threads by wall time (the library's pool does the work).
void apply(benchmark::internal::Benchmark* b, const run_settings& r, bool real_time) {
  b->Unit(benchmark::kMillisecond);
  if (real_time) b->UseRealTime();
  if (r.min_time > 0) b->MinTime(r.min_time);
  if (r.iterations > 0) b->Iterations(r.iterations);
  if (r.repetitions > 0)
    b->Repetitions(r.repetitions)
        ->DisplayAggregatesOnly()
        ->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
}

/// (`p`: the other variants' rows exist for GatedDelta; their rule name carries the variant.)
template <class Rule>
void add_form(form f, const shape& s, const run_settings& r, variant p = variant::f32) {
  const std::string rule = std::string(Rule::name) + variant_suffix(p);
  std::string name = rule + "/" + form_name(f) + "/T:" + std::to_string(s.T) +
                     "/H:" + std::to_string(s.H) + "/K:" + std::to_string(s.K);
  if (f == form::chunkwise) name += "/C:" + std::to_string(s.C);
  name += "/threads:" + std::to_string(s.threads);
  const double flops = useful_flops(f, kind_of<Rule>(), decays<Rule>(), s, steps_of<Rule>());
  const bool wall = r.wall || s.threads > 1;
  add_row(name, row_info{rule, f, s, flops, wall});
  const auto run = [f, s, flops, p](benchmark::State& st) { bench_form<Rule>(st, f, s, flops, p); };
  apply(benchmark::RegisterBenchmark(name.c_str(), run), r, wall);
}

void add_gemm(const run_settings& r) {
  add_row("gemm_1024", row_info{"", form::recurrent, shape{}, gemm_flops});
  apply(benchmark::RegisterBenchmark("gemm_1024", bench_gemm), r, false);
}

/// Registers every rule for one shape: recurrent and parallel once, chunkwise for each C.
template <class Rule>
void add_rule(shape s, const std::vector<index_t>& chunks, const std::vector<int>& threads, bool parallel,
              const run_settings& r) {
  for (int t : threads) {
    s.threads = t;
    add_form<Rule>(form::recurrent, s, r);
    if (parallel && t == 1) add_form<Rule>(form::parallel, s, r);
    for (index_t c : chunks) {
      s.C = c;
      add_form<Rule>(form::chunkwise, s, r);
    }
  }
}

template <class... Rules>
void add_rules(const shape& s, const std::vector<index_t>& chunks, const std::vector<int>& threads,
               bool parallel, const run_settings& r) {
  (add_rule<Rules>(s, chunks, threads, parallel, r), ...);
}

/// The quadratic reference: softmax attention's online (FlashAttention-style) chunkwise form,
/// query tiles and key blocks of s.C tokens, at each thread count (and C in `chunks`).
void add_softmax(shape s, const std::vector<index_t>& chunks, const std::vector<int>& threads, bool parallel,
                 const run_settings& r) {
  for (int t : threads) {
    s.threads = t;
    if (parallel && t == 1) add_form<la::SoftmaxAttention>(form::parallel, s, r);
    for (index_t c : chunks) {
      s.C = c;
      add_form<la::SoftmaxAttention>(form::chunkwise, s, r);
    }
  }
}

enum class mode { main_job, sweep, delta, threads, decode, smoke };

void register_all(mode m) {
  using la::Hebbian, la::ScalarDecay, la::VectorDecay, la::Delta, la::GatedDelta, la::Longhorn, la::NLMS, la::KDA, la::mLSTM;
  using la::RWKV7;
  using la::LonghornDiagonal, la::DeltaProduct, la::GatedDeltaProduct, la::Mamba, la::RLS;
  if (m == mode::main_job) {
    // Parallel is the expensive one (quadratic): one thread only; the rest also at 2 threads.
    // (TTT-Linear has its own executable, linattn_bench_ttt.)
    const run_settings r{0, 0, 5};
    // C = 16 beside the default 64: on some cores (the Zen 5 VM of bench/README.md) the small
    // chunk is the faster one, and the summary picks each rule's fastest.
    add_rules<Hebbian, ScalarDecay, VectorDecay, GatedDelta>(shape{1, 4096, 8, 128, 128, 64}, {16, 64}, {1, 2}, true, r);
    // 16-bit inputs (float state): bfloat16 q, k, v with g and beta in bfloat16 or in float.
    // Float inputs with options::normalize_qk: what normalising q and k inside the call costs.
    for (variant p : {variant::bf16, variant::bf16_f32_gates, variant::normalize_qk})
      for (form f : {form::recurrent, form::chunkwise}) add_form<GatedDelta>(f, shape{1, 4096, 8, 128, 128, 64}, r, p);
    add_rules<Delta, Longhorn, LonghornDiagonal, NLMS, KDA, RWKV7, mLSTM>(shape{1, 4096, 8, 128, 128, 64}, {16, 64}, {1}, true,
                                                                       r);
    // n_h = 2: the parallel form would be one 8192-sub-step system per head (O(L^2) memory).
    add_rules<DeltaProduct, GatedDeltaProduct>(shape{1, 4096, 8, 128, 128, 64}, {16, 32, 64}, {1}, false, r);
    // Mamba: the T x T form costs T^2 K V / 2 exponentials per head (1.1e12 here): not run.
    add_rules<Mamba>(shape{1, 4096, 8, 128, 128, 64}, {16, 64}, {1}, false, r);
    // RLS (state [K, V + K]): the parallel form is one K x K Cholesky per token, O(L K^3): not run.
    add_rules<RLS>(shape{1, 4096, 8, 128, 128, 64}, {64}, {1}, false, r);
    add_row("Mamba_exps_only", row_info{"", form::recurrent, shape{}, 0});
    apply(benchmark::RegisterBenchmark("Mamba_exps_only", bench_scan_exps), r, false);
    add_softmax(shape{1, 4096, 8, 128, 128, 64}, {64, 128}, {1, 2}, false, r);
    add_gemm(r);
  } else if (m == mode::delta) {
    // The delta-rule shape: GatedDelta at B=1 T=8192 H=16 K=V=128, one thread, every form.
    const run_settings r{0, 0, 3};
    add_rules<GatedDelta>(shape{1, 8192, 16, 128, 128, 64}, {16, 32, 64, 128}, {1}, true, r);
    add_softmax(shape{1, 8192, 16, 128, 128, 64}, {64, 128}, {1}, false, r);
    add_gemm(r);
  } else if (m == mode::threads) {
    // Thread scaling at T=8192, K=V=128, wall time: H=16 (heads spread over threads) and
    // H=1, H=2 (fewer heads than threads: the delta rule's chunks go across threads).
    const run_settings r{0, 0, 5, true};
    for (index_t H : {1, 2, 16}) {
      add_rules<GatedDelta>(shape{1, 8192, H, 128, 128, 64}, {64}, {1, 2}, false, r);
      add_rules<ScalarDecay>(shape{1, 8192, H, 128, 128, 64}, {64}, {1, 2}, false, r);
    }
  } else if (m == mode::decode) {
    const run_settings r{0, 0, 5};
    const auto reg = [&](const std::string& name, auto fn, bool wall = false) {
      row_info info{"", form::recurrent, shape{}, 0};
      info.real_time = wall;
      add_row(name, info);
      benchmark::internal::Benchmark* b = benchmark::RegisterBenchmark(name.c_str(), fn);
      apply(b, r, wall);
      b->Unit(benchmark::kMicrosecond);
    };
    reg("GatedDelta/decode/H:16/K:128/states:1", [](benchmark::State& st) { bench_decode(st, {}); });
    reg("GatedDelta/decode/H:16/K:128/states:256", [](benchmark::State& st) { bench_decode(st, {.states = 256}); });
    // Serving rows, wall time (one and two threads compare): contiguous state vs slot 5 of a
    // pool, and verify_drafts of 4 draft tokens from the pool.
    for (const int th : {1, 2}) {
      const std::string t = "/threads:" + std::to_string(th);
      reg("GatedDelta/decode/contiguous" + t,
          [th](benchmark::State& st) { bench_decode(st, {.threads = th}); }, true);
      reg("GatedDelta/decode/pool" + t,
          [th](benchmark::State& st) { bench_decode(st, {.threads = th, .pool = true}); }, true);
      reg("GatedDelta/verify_drafts:4/pool" + t,
          [th](benchmark::State& st) { bench_decode(st, {.threads = th, .pool = true, .drafts = 4}); }, true);
      reg("GatedDelta/verify_drafts:4/record/pool" + t,
          [th](benchmark::State& st) { bench_decode(st, {.threads = th, .pool = true, .drafts = 4, .record = true}); },
          true);
      // 32 sequences (32 MiB of states, read from memory): decode, verify and commit.
      reg("GatedDelta/decode/pool/B:32" + t,
          [th](benchmark::State& st) { bench_decode(st, {.threads = th, .pool = true, .batch = 32}); }, true);
      reg("GatedDelta/verify_drafts:4/record/pool/B:32" + t,
          [th](benchmark::State& st) {
            bench_decode(st, {.threads = th, .pool = true, .drafts = 4, .batch = 32, .record = true});
          },
          true);
      reg("GatedDelta/commit_drafts:4/record/pool/B:32" + t,
          [th](benchmark::State& st) {
            bench_decode(st, {.threads = th, .pool = true, .drafts = 4, .batch = 32, .record = true, .commit = true});
          },
          true);
    }
    reg("copy_state/states:1", [](benchmark::State& st) { bench_copy(st, decode_state_bytes, 1); });
    reg("copy_state/states:256", [](benchmark::State& st) { bench_copy(st, decode_state_bytes, 256); });
  } else if (m == mode::sweep) {
    const run_settings r{0.1, 0, 0};
    add_gemm(r);
    for (index_t T : {64, 128, 256, 512, 1024, 2048, 4096, 16384})
      for (index_t K : {64, 128}) {
        add_rules<Hebbian, ScalarDecay, VectorDecay>(shape{1, T, 4, K, K, 64}, {16, 32, 64, 128}, {1}, true, r);
        add_softmax(shape{1, T, 4, K, K, 64}, {64, 128}, {1}, false, r);
      }
  } else {
    // T not a multiple of C, K != V, B > 1: every code path, in milliseconds.
    add_rules<Hebbian, ScalarDecay, VectorDecay, Delta, GatedDelta, Longhorn, LonghornDiagonal, KDA, RWKV7, mLSTM, Mamba,
              DeltaProduct, GatedDeltaProduct, RLS>(shape{2, 72, 2, 16, 24, 16}, {16}, {1, 2}, true, {0, 2, 0});
    for (variant p : {variant::bf16, variant::bf16_f32_gates, variant::normalize_qk})
      for (form f : {form::recurrent, form::chunkwise}) add_form<GatedDelta>(f, shape{2, 72, 2, 16, 24, 16}, {0, 2, 0}, p);
    add_softmax(shape{2, 72, 2, 16, 24, 16}, {16}, {1, 2}, true, {0, 2, 0});
    add_gemm({0, 1, 0});
  }
}

// ---- summary -----------------------------------------------------------------------------

/// Console reporter that also keeps each row's time per iteration and prints summary tables
/// after the last row. Times are the ones the row's counters use (CPU time on one thread, wall
/// time on more); with repetitions, the median.
class summary_reporter : public median_reporter {
 public:
  explicit summary_reporter(mode m)
      : median_reporter([](const std::string& name) { return registry().count(name) && registry().at(name).real_time; }),
        mode_(m) {}

 private:
  void summary() override {
    if (mode_ == mode::sweep) print_sweep();
    else if (mode_ == mode::decode) print_decode();
    else print_rows();
  }

  double gflops(const std::string& name) const {
    const double t = seconds(name);
    return t > 0 ? registry().at(name).flops / t * 1e-9 : 0;
  }
  /// Name of the recurrent row that matches a row (same rule, sizes, threads).
  static std::string recurrent_of(const row_info& i) {
    return i.rule + "/recurrent/T:" + std::to_string(i.s.T) + "/H:" + std::to_string(i.s.H) + "/K:" +
           std::to_string(i.s.K) + "/threads:" + std::to_string(i.s.threads);
  }

  /// Seconds of the fastest softmax-attention row of the same T, H, K and threads (0: none).
  double softmax_seconds(const row_info& i) const {
    double best = 0;
    for (const auto& [name, o] : registry())
      if (o.rule == "SoftmaxAttention" && o.s.T == i.s.T && o.s.H == i.s.H && o.s.K == i.s.K &&
          o.s.threads == i.s.threads && seconds(name) > 0 && (best == 0 || seconds(name) < best))
        best = seconds(name);
    return best;
  }

  /// One line per row: rule, form, ms, tokens/s, GFLOP/s, speed-ups vs recurrent and vs
  /// softmax attention, % of GEMM.
  void print_rows() const {
    const double gemm = gflops("gemm_1024");
    line("\nSummary (threads=1: CPU time, threads>1: wall time; vs rec = speed-up over the recurrent"
         " form of the same rule and threads; vs smax = speed-up over the fastest softmax-attention row"
         " of the same shape and threads)");
    line("%%GEMM = the row's useful GFLOP/s (the FLOPs its rule needs, docs/math.md#costs) as a share of one"
         " core's Eigen 1024^3 GEMM in this run; above 100 when a threads:2 row uses two cores, or when the"
         " chunk products (no operand packing) beat Eigen's GEMM.");
    line("%-20s %-10s %6s %4s %4s %8s %10s %11s %8s %8s %8s %6s", "rule", "form", "T", "H", "C", "threads", "ms",
         "tokens/s", "GFLOP/s", "vs rec", "vs smax", "%GEMM");
    for (const std::string& name : order()) {
      const row_info& i = registry().at(name);
      if (i.rule.empty() || seconds(name) == 0) continue;
      const double t = seconds(name), rec = seconds(recurrent_of(i));
      const std::string c = i.f == form::chunkwise ? std::to_string(i.s.C) : "-";
      const double smax = softmax_seconds(i);
      const std::string vs_rec = rec > 0 ? fixed(rec / t, "%.2fx") : "-";
      const std::string vs_smax = smax > 0 ? fixed(smax / t, "%.2fx") : "-";
      const std::string of_gemm = gemm > 0 ? fixed(100 * gflops(name) / gemm, "%.0f") : "-";
      line("%-20s %-10s %6td %4td %4s %8d %10.2f %11.0f %8.2f %8s %8s %6s", i.rule.c_str(), form_name(i.f), i.s.T,
           i.s.H, c.c_str(), i.s.threads, t * 1e3, double(i.s.B * i.s.T) / t, gflops(name), vs_rec.c_str(),
           vs_smax.c_str(), of_gemm.c_str());
    }
    if (gemm > 0)
      line("%-20s %-10s %6s %4s %4s %8d %10.2f %11s %8.2f %8s %8s %6s", "gemm_1024", "eigen", "-", "-", "-", 1,
           seconds("gemm_1024") * 1e3, "-", gemm, "-", "-", "100");
    print_scaling();
    print_verdicts();
  }

  /// One line per rule and shape (one thread): the fastest form and its margin over the others.
  void print_verdicts() const {
    std::map<std::string, std::vector<std::string>> by_rule;  // "rule T H" -> its threads:1 rows
    std::vector<std::string> keys;
    for (const std::string& name : order()) {
      const row_info& i = registry().at(name);
      if (i.rule.empty() || i.s.threads != 1 || seconds(name) == 0) continue;
      const std::string key = i.rule + " at T=" + std::to_string(i.s.T) + ", H=" + std::to_string(i.s.H);
      if (!by_rule.count(key)) keys.push_back(key);
      by_rule[key].push_back(name);
    }
    if (keys.empty()) return;
    line("\nWhich form wins (one thread; the fastest chunk size of the chunkwise form):");
    for (const std::string& key : keys) {
      std::map<form, double> best;  // fastest time per form
      for (const std::string& name : by_rule[key]) {
        const form f = registry().at(name).f;
        if (!best.count(f) || seconds(name) < best[f]) best[f] = seconds(name);
      }
      auto win = best.begin();
      for (auto it = best.begin(); it != best.end(); ++it)
        if (it->second < win->second) win = it;
      std::string margins;
      for (const auto& [f, t] : best)
        if (f != win->first) margins += (margins.empty() ? "" : ", ") + fixed(t / win->second, "%.2fx") + " faster than " + form_name(f);
      line("  %-38s %-10s %s", key.c_str(), form_name(win->first), margins.empty() ? "(only form)" : margins.c_str());
    }
  }

  /// Rows on several threads against the same row on one thread: the ratio of the median
  /// repetitions, and of the fastest ones (each row's least disturbed one; on a shared machine the
  /// other tenants slow a two-thread row whenever either core is busy, a one-thread row only
  /// when its own core is).
  void print_scaling() const {
    bool header = false;
    for (const std::string& name : order()) {
      const row_info& i = registry().at(name);
      const std::string one = one_thread_of(name, i);
      if (i.rule.empty() || i.s.threads == 1 || seconds(name) == 0 || seconds(one) == 0) continue;
      if (!header) {
        line("\nThread scaling (%s; x = one-thread time / this row's time)",
             registry().at(one).real_time ? "wall time" : "one thread: CPU time, more: wall time");
        line("%-20s %-10s %6s %4s %4s %8s %10s %10s %9s %10s %10s %9s", "rule", "form", "T", "H", "C", "threads",
             "1 thr ms", "n thr ms", "x median", "1 thr best", "n thr best", "x best");
        header = true;
      }
      const std::string c = i.f == form::chunkwise ? std::to_string(i.s.C) : "-";
      line("%-20s %-10s %6td %4td %4s %8d %10.2f %10.2f %8.2fx %10.2f %10.2f %8.2fx", i.rule.c_str(), form_name(i.f),
           i.s.T, i.s.H, c.c_str(), i.s.threads, seconds(one) * 1e3, seconds(name) * 1e3, seconds(one) / seconds(name),
           fastest(one) * 1e3, fastest(name) * 1e3, fastest(one) / fastest(name));
    }
  }

  /// Name of the same row on one thread.
  static std::string one_thread_of(const std::string& name, const row_info& i) {
    const std::string tail = "/threads:" + std::to_string(i.s.threads);
    return name.substr(0, name.size() - tail.size()) + "/threads:1";
  }

  /// decode_step and state copies: time per call, bytes moved per second (the state read and
  /// written once), and the ratio to the memory floor = the cold copy of the state bytes.
  void print_decode() const {
    const double floor = seconds("copy_state/states:256");
    line("\nDecode summary (one core, CPU time; state = 16 x 128 x 128 fp32 = 1 MiB, read and written once per"
         " call; floor = copy_state/states:256, a copy of the state bytes from and to memory)");
    line("%-48s %10s %10s %9s", "row", "us/call", "GB/s", "x floor");
    for (const std::string& name : order()) {
      const double t = seconds(name);
      if (t == 0) continue;
      const double states = name.find("/B:32") != std::string::npos ? 32.0 : 1.0;  // sequences per call
      line("%-48s %10.1f %10.2f %9s", name.c_str(), t * 1e6, 2 * states * decode_state_bytes / t * 1e-9,
           floor > 0 ? fixed(t / (states * floor), "%.2fx").c_str() : "-");
    }
    // Serving ratios (wall time): pool / contiguous, 1 thread / 2 threads, verify 4 / decode.
    const auto ratio = [&](const char* what, const std::string& a, const std::string& b) {
      const double ta = seconds(a), tb = seconds(b);
      if (ta > 0 && tb > 0) line("%-58s %6.2fx", what, ta / tb);
    };
    line("\nServing ratios (wall time)");
    for (const char* th : {"1", "2"}) {
      const std::string t = std::string("/threads:") + th;
      ratio(("pool / contiguous decode, threads " + std::string(th)).c_str(), "GatedDelta/decode/pool" + t,
            "GatedDelta/decode/contiguous" + t);
      ratio(("verify_drafts:4 (states) / pool decode, threads " + std::string(th)).c_str(),
            "GatedDelta/verify_drafts:4/pool" + t, "GatedDelta/decode/pool" + t);
      ratio(("verify_drafts:4 (record) / pool decode, threads " + std::string(th)).c_str(),
            "GatedDelta/verify_drafts:4/record/pool" + t, "GatedDelta/decode/pool" + t);
      ratio(("B=32: verify_drafts:4 (record) / pool decode, threads " + std::string(th)).c_str(),
            "GatedDelta/verify_drafts:4/record/pool/B:32" + t, "GatedDelta/decode/pool/B:32" + t);
      ratio(("B=32: commit_drafts:4 (record) / pool decode, threads " + std::string(th)).c_str(),
            "GatedDelta/commit_drafts:4/record/pool/B:32" + t, "GatedDelta/decode/pool/B:32" + t);
    }
    ratio("contiguous decode: 1 thread / 2 threads", "GatedDelta/decode/contiguous/threads:1",
          "GatedDelta/decode/contiguous/threads:2");
    ratio("pool decode: 1 thread / 2 threads", "GatedDelta/decode/pool/threads:1", "GatedDelta/decode/pool/threads:2");
  }

  /// One line per (rule, K, T): recurrent time, speed-ups of parallel and of each chunk size,
  /// the best chunkwise GFLOP/s as a share of the GEMM row, and the best chunkwise form's
  /// speed-up over the fastest softmax-attention row (> 1: the linear form is faster).
  void print_sweep() const {
    const double gemm = gflops("gemm_1024");
    line("\nSweep summary (threads=1; speed-up = recurrent ms / form ms; best C by time;"
         " gemm_1024 = %s GFLOP/s)", gemm > 0 ? fixed(gemm, "%.2f").c_str() : "-");
    line("%-12s %4s %6s %9s %7s %7s %7s %7s %7s %5s %8s %6s %9s %8s", "rule", "K", "T", "rec ms", "par x",
         "C16 x", "C32 x", "C64 x", "C128 x", "bestC", "GFLOP/s", "%GEMM", "smax ms", "vs smax");
    for (const std::string& rec_name : order()) {
      const row_info& i = registry().at(rec_name);
      const double rec = seconds(rec_name);
      if (i.rule.empty() || i.f != form::recurrent || rec == 0) continue;
      const std::string stem = i.rule + "/";
      const std::string tail = "/T:" + std::to_string(i.s.T) + "/H:" + std::to_string(i.s.H) + "/K:" + std::to_string(i.s.K);
      const auto speedup = [&](const std::string& n) {
        const double t = seconds(n);
        return t > 0 ? fixed(rec / t, "%.3g") : std::string("-");
      };
      std::string cs[4], best;
      const index_t chunks[4] = {16, 32, 64, 128};
      for (int j = 0; j < 4; ++j) {
        const std::string n = stem + "chunkwise" + tail + "/C:" + std::to_string(chunks[j]) + "/threads:1";
        cs[j] = speedup(n);
        if (seconds(n) > 0 && (best.empty() || seconds(n) < seconds(best))) best = n;
      }
      const double g = best.empty() ? 0 : gflops(best);
      const std::string par = speedup(stem + "parallel" + tail + "/threads:1");
      const std::string best_c = best.empty() ? "-" : std::to_string(registry().at(best).s.C);
      const std::string of_gemm = gemm > 0 && g > 0 ? fixed(100 * g / gemm, "%.0f") : "-";
      const double smax = softmax_seconds(i);
      const std::string smax_ms = smax > 0 ? fixed(smax * 1e3, "%.2f") : "-";
      const std::string vs_smax = smax > 0 && !best.empty() ? fixed(smax / seconds(best), "%.3gx") : "-";
      line("%-12s %4td %6td %9.2f %7s %7s %7s %7s %7s %5s %8.2f %6s %9s %8s", i.rule.c_str(), i.s.K, i.s.T,
           rec * 1e3, par.c_str(), cs[0].c_str(), cs[1].c_str(), cs[2].c_str(), cs[3].c_str(), best_c.c_str(), g,
           of_gemm.c_str(), smax_ms.c_str(), vs_smax.c_str());
    }
  }

  mode mode_;
};

}  // namespace

int main(int argc, char** argv) {
  // Our flags first; everything else goes to Google Benchmark.
  mode m = mode::main_job;
  bool raw = false;
  command_line cli(argc, argv, [&](std::string_view a) {
    if (a == "--raw") return raw = true;
    const std::pair<std::string_view, mode> flags[] = {
        {"--sweep", mode::sweep}, {"--delta", mode::delta}, {"--threads", mode::threads},
        {"--decode", mode::decode}, {"--smoke", mode::smoke}};
    for (const auto& [flag, fm] : flags)
      if (a == flag) return m = fm, true;
    return false;
  });
  const char* file = m == mode::sweep     ? "forms_sweep.json"
                     : m == mode::delta   ? "gated_delta.json"
                     : m == mode::threads ? "threads.json"
                     : m == mode::decode  ? "decode.json"
                     : m == mode::smoke   ? ""
                                          : "forms.json";
  if (!cli.initialize(file, m != mode::sweep && m != mode::smoke)) return 1;
  register_all(m);
  const char* mode_name[] = {"main", "sweep", "delta", "threads", "decode", "smoke"};
  const char* shape_name[] = {"B=1 H=8 V=K", "B=1 H=4 V=K", "B=1 T=8192 H=16 K=V=128", "B=1 T=8192 H=1,2,16 K=V=128",
                              "B=1 T=1 H=16 K=V=128", "B=2 H=2 K=16 V=24"};
  benchmark::AddCustomContext("linattn_mode", mode_name[static_cast<int>(m)]);
  benchmark::AddCustomContext("linattn_shape", shape_name[static_cast<int>(m)]);
  summary_reporter reporter(m);
  reporter.show_raw_rows(raw || m == mode::smoke);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
