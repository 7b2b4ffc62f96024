// SPDX-License-Identifier: MIT
/// \file
/// CUDA benchmarks: median CUDA-event time of linattn::cuda calls on shapes that fill the GPU
/// (docs/design.md#performance-references), with the L2 cache flushed before every timed call (as triton's do_bench
/// does, so the fla comparison is like for like), next to the memory floor from a
/// device-to-device copy timed in the same run.
///
///   linattn_bench_cuda [--json FILE] [--reps N] [--rules] [--training] [--shape I [--backward]]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <linattn/cuda.cuh>

namespace {

namespace la = linattn;
using la::index_t;

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

/// Random values from a counter hash: normal-ish (sum of uniforms), or shaped for gates/beta.
enum class fill_kind { normal, log_gate, beta };

__device__ float uniform(unsigned long long i, unsigned seed) {
  unsigned long long x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (unsigned long long)(seed) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return float(x >> 40) * (1.0f / 16777216.0f);
}

template <class T>
__global__ void fill(T* p, index_t n, unsigned seed, fill_kind kind) {
  for (index_t i = blockIdx.x * index_t(blockDim.x) + threadIdx.x; i < n; i += index_t(gridDim.x) * blockDim.x) {
    float x = uniform(i, seed) + uniform(i, seed + 1) + uniform(i, seed + 2) - 1.5f;  // ~N(0, 1/4)
    if (kind == fill_kind::log_gate) x = -log1pf(__expf(-(2.0f * x + 3.0f)));      // logsigmoid(N + 3)
    if (kind == fill_kind::beta) x = 1.0f / (1.0f + __expf(-2.0f * x));             // sigmoid(N)
    p[i] = la::cuda::detail::from_float<T>(x);
  }
}

/// Scales each row of D elements to unit L2 norm (keys of the delta rules).
template <class T>
__global__ void normalise_rows(T* p, index_t rows, int D) {
  const index_t r = blockIdx.x * index_t(blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  float s = 0;
  for (int i = threadIdx.x % 32; i < D; i += 32) s += la::cuda::detail::to_float(p[r * D + i]) * la::cuda::detail::to_float(p[r * D + i]);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float inv = rsqrtf(s);
  for (int i = threadIdx.x % 32; i < D; i += 32) p[r * D + i] = la::cuda::detail::from_float<T>(la::cuda::detail::to_float(p[r * D + i]) * inv);
}

template <class T>
T* device_random(index_t n, unsigned seed, fill_kind kind) {
  T* p = nullptr;
  ok(cudaMalloc(&p, std::size_t(n) * sizeof(T)), "cudaMalloc");
  fill<<<1024, 256>>>(p, n, seed, kind);
  ok(cudaGetLastError(), "fill");
  return p;
}

/// Median event time (ms) of fn over `reps` calls after 3 warm-ups; the L2 cache is flushed
/// (a 256 MiB memset) before each timed call, outside the timed region.
double median_ms(const std::function<void()>& fn, int reps) {
  static void* flush = nullptr;
  const std::size_t flush_bytes = std::size_t(256) << 20;
  if (!flush) ok(cudaMalloc(&flush, flush_bytes), "cudaMalloc(flush)");
  for (int i = 0; i < 3; ++i) fn();
  ok(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    ok(cudaMemsetAsync(flush, i & 0xff, flush_bytes), "flush");
    cudaEventRecord(a);
    fn();
    cudaEventRecord(b);
    ok(cudaEventSynchronize(b), "timed call");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct row {
  std::string name;
  int B, T, H, D;
  double ms, floor_ms;
};

/// Median time (ms) of a device-to-device copy of `bytes`.
double copy_ms(std::size_t bytes, int reps) {
  void *src, *dst;
  ok(cudaMalloc(&src, bytes), "cudaMalloc");
  ok(cudaMalloc(&dst, bytes), "cudaMalloc");
  ok(cudaMemset(src, 1, bytes), "cudaMemset");
  const double ms = median_ms([&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice); }, reps);
  cudaFree(src);
  cudaFree(dst);
  return ms;
}

/// Bytes/s of a large device-to-device copy, counting bytes read and written.
double copy_bandwidth(int reps) {
  const std::size_t bytes = std::size_t(2) << 30;
  return 2.0 * double(bytes) / (copy_ms(bytes, reps) * 1e-3);
}

using E = __nv_bfloat16;

/// The input type's name in the row names.
template <class X>
constexpr const char* element_name() {
  return std::is_same_v<X, __half> ? "fp16" : "bf16";
}

/// A per-token coefficient (g, beta) or its gradient [B, T, H] on the device, in the input type
/// X or, for fla's mixed precision, fp32; as the rule's coefficient view.
template <class View, class X = E>
View coefficients(void* p, bool fp32, int B, int T, int H) {
  if (fp32) return View(la::view(static_cast<float*>(p), B, T, H));
  return View(la::view(static_cast<X*>(p), B, T, H));
}

/// Random GatedDelta inputs (q, k, v of type E, bf16 or fp16; g and beta in E or, `fp32_gates`,
/// fp32; K = V = D, HV = H), an output and an fp32 state, on the device for as long as the
/// object lives. The other rules take theirs from the same buffers (rule_inputs).
template <class E = ::E>
struct gated_delta_buffers {
  int B, T, H, D;
  index_t qk, tok;
  bool fp32_gates;
  E *q, *k, *v, *o = nullptr;
  void *g, *beta;
  float* state;

  gated_delta_buffers(int B_, int T_, int H_, int D_, unsigned seed, bool fp32_gates_ = false)
      : B(B_), T(T_), H(H_), D(D_), qk(index_t(B_) * T_ * H_ * D_), tok(index_t(B_) * T_ * H_), fp32_gates(fp32_gates_) {
    q = device_random<E>(qk, seed, fill_kind::normal);
    k = device_random<E>(qk, seed + 1, fill_kind::normal);
    normalise_rows<<<unsigned((tok + 7) / 8), 256>>>(k, tok, D);
    v = device_random<E>(qk, seed + 2, fill_kind::normal);
    if (fp32_gates) {
      g = device_random<float>(tok, seed + 3, fill_kind::log_gate);
      beta = device_random<float>(tok, seed + 4, fill_kind::beta);
    } else {
      g = device_random<E>(tok, seed + 3, fill_kind::log_gate);
      beta = device_random<E>(tok, seed + 4, fill_kind::beta);
    }
    state = device_random<float>(index_t(B) * H * D * D, seed + 5, fill_kind::normal);
    ok(cudaMalloc(&o, std::size_t(qk) * sizeof(E)), "cudaMalloc");
  }
  /// Bytes of one per-token coefficient element.
  std::size_t coefficient_bytes() const { return fp32_gates ? sizeof(float) : sizeof(E); }
  std::string precision() const { return std::string(element_name<E>()) + (fp32_gates ? "+fp32 g,beta " : " "); }
  gated_delta_buffers(const gated_delta_buffers&) = delete;
  gated_delta_buffers& operator=(const gated_delta_buffers&) = delete;
  ~gated_delta_buffers() {
    for (void* p : {(void*)q, (void*)k, (void*)v, (void*)g, (void*)beta, (void*)o, (void*)state}) cudaFree(p);
  }
  la::GatedDelta::inputs<E> inputs() const {
    using view_t = la::coefficient_view<E, 3>;
    return {.q = la::view<const E>(q, B, T, H, D), .k = la::view<const E>(k, B, T, H, D),
            .v = la::view<const E>(v, B, T, H, D), .g = coefficients<view_t, E>(g, fp32_gates, B, T, H),
            .beta = coefficients<view_t, E>(beta, fp32_gates, B, T, H)};
  }
  la::tensor_view<E, 4> out() const { return la::view(o, B, T, H, D); }
  la::tensor_view<float, 4> states() const { return la::view(state, B, H, D, D); }
  double state_bytes() const { return double(B) * H * D * D * 4; }
};

/// GatedDelta chunkwise (or recurrent) forward with the final state written (no initial
/// state), as fla's chunk_gated_delta_rule with output_final_state=True; `every` > 0: also
/// the checkpoints every `every` tokens (prefix caching), the same call otherwise.
row forward(const char* form, int B, int T, int H, int D, int reps, double bw, int every = 0, bool fp32_gates = false) {
  const gated_delta_buffers x(B, T, H, D, 1, fp32_gates);
  const auto in = x.inputs();
  la::options<float> opt;
  opt.final_state = x.states();
  const index_t J = every > 0 ? (T + every - 1) / every : 0, per = index_t(H) * D * D;
  float* cp = nullptr;
  if (every > 0) {
    ok(cudaMalloc(&cp, std::size_t(B * J * per) * sizeof(float)), "cudaMalloc");
    opt.checkpoint_every = every;
    opt.checkpoints = la::tensor_view<float, 5>(cp, {B, J, H, D, D}, {J * per, per, index_t(D) * D, D, 1});
  }
  const bool chunked = std::string(form) == "chunkwise";
  const double ms = median_ms([&] {
    if (chunked) la::cuda::chunkwise_forward<la::GatedDelta>(in, x.out(), opt);
    else la::cuda::recurrent_forward<la::GatedDelta>(in, x.out(), opt);
  }, reps);
  cudaFree(cp);
  // memory floor: read q, k, v, g, beta once, write o, the final state and the checkpoints once
  const double bytes = double(x.qk) * 4 * sizeof(E) + double(x.tok) * 2 * x.coefficient_bytes() + x.state_bytes() +
                       double(B * J * per) * 4;
  return {std::string("GatedDelta ") + x.precision() + form + (every > 0 ? ", checkpoints/" + std::to_string(every) : ""),
          B, T, H, D, ms, bytes / bw * 1e3};
}

/// GatedDelta chunkwise backward (bf16, no initial state, no final-state gradient), as fla's
/// chunk_gated_delta_rule backward after a forward with output_final_state=True; with
/// `with_forward`, the forward and the backward in one timed call (a training step's share).
/// (`fp32_gates`: g, beta and their gradients in fp32, fla's mixed precision.)
row backward(int B, int T, int H, int D, int reps, double bw, bool with_forward, bool fp32_gates = false) {
  const gated_delta_buffers x(B, T, H, D, 1, fp32_gates);
  const auto in = x.inputs();
  E* dout = device_random<E>(x.qk, 21, fill_kind::normal);
  E *dq, *dk, *dv;
  void *dg, *db;
  for (E** p : {&dq, &dk, &dv}) ok(cudaMalloc(p, std::size_t(x.qk) * sizeof(E)), "cudaMalloc");
  for (void** p : {&dg, &db}) ok(cudaMalloc(p, std::size_t(x.tok) * x.coefficient_bytes()), "cudaMalloc");
  using grad_t = la::coefficient_gradient_view<E, 3>;
  la::GatedDelta::gradients<E> gr{.dq = la::view(dq, B, T, H, D), .dk = la::view(dk, B, T, H, D),
                                  .dv = la::view(dv, B, T, H, D), .dg = coefficients<grad_t>(dg, fp32_gates, B, T, H),
                                  .dbeta = coefficients<grad_t>(db, fp32_gates, B, T, H)};
  la::options<float> fwd;
  fwd.final_state = x.states();
  const la::tensor_view<const E, 4> grad_out = la::view<const E>(dout, B, T, H, D);
  const double ms = median_ms([&] {
    if (with_forward) la::cuda::chunkwise_forward<la::GatedDelta>(in, x.out(), fwd);
    la::cuda::chunkwise_backward<la::GatedDelta>(in, grad_out, gr);
  }, reps);
  for (void* p : {(void*)dout, (void*)dq, (void*)dk, (void*)dv, (void*)dg, (void*)db}) cudaFree(p);
  // memory floor: read q, k, v, g, beta, dO once, write their gradients once
  const double bytes = double(x.qk) * 7 * sizeof(E) + double(x.tok) * 4 * x.coefficient_bytes();
  return {std::string("GatedDelta ") + x.precision() + (with_forward ? "fwd+bwd" : "backward"), B, T, H, D, ms,
          bytes / bw * 1e3};
}

/// A device-to-device copy of decode's state bytes (B sequences, fp32 [B, H, D, D]), timed as
/// decode is: what moving those bytes costs at this size, launch and ramp included (the floor
/// column assumes the bandwidth of a 2 GiB copy).
row state_copy(int B, int H, int D, int reps, double bw) {
  const std::size_t bytes = std::size_t(B) * H * D * D * sizeof(float);
  return {"state copy (cudaMemcpy, decode's bytes)", B, 1, H, D, copy_ms(bytes, reps), 2.0 * double(bytes) / bw * 1e3};
}

/// Layers of a decode loop (per_step_ms) whose states of `state_bytes` each are together at
/// least four times the L2 cache, so that every step reads its state from memory, as in a
/// model; 8 to 256.
int loop_layers(std::size_t state_bytes) {
  int device = 0, l2 = 0;
  ok(cudaGetDevice(&device), "cudaGetDevice");
  ok(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), "cudaDeviceGetAttribute");
  return int(std::clamp<std::size_t>((4 * std::size_t(l2) + state_bytes - 1) / state_bytes, 8, 256));
}

/// The per-step time (ms) of a decode loop as a serving engine runs it: L steps, one per layer,
/// captured from a stream into a CUDA graph and replayed (no host launch cost inside the loop),
/// timed as every row (median_ms) and divided by L. `step(l, stream)` queues layer l's step and
/// throws on failure. A loop that cannot be captured gives NaN and says why (the other rows
/// still run).
double per_step_ms(int L, int reps, const std::function<void(int, cudaStream_t)>& step) {
  cudaStream_t s;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  std::string failure;
  cudaGraph_t graph = nullptr;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    try {
      for (int l = 0; l < L; ++l) step(l, s);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    const cudaError_t ended = cudaStreamEndCapture(s, &graph);
    if (failure.empty() && ended != cudaSuccess) failure = cudaGetErrorString(ended);
  } else {
    failure = "cudaStreamBeginCapture failed";
  }
  cudaGraphExec_t exec = nullptr;
  if (failure.empty() && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) failure = "cudaGraphInstantiate failed";
  double ms = std::nan("");
  if (failure.empty()) {
    // replayed on the legacy stream, where median_ms flushes and records its events
    ms = median_ms([&] { ok(cudaGraphLaunch(exec, 0), "cudaGraphLaunch"); }, reps) / L;
  } else {
    std::fprintf(stderr, "decode loop not captured: %s\n", failure.c_str());
    cudaGetLastError();  // a failed capture leaves no error for the next row
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  return ms;
}

/// The same loop with each step a device-to-device copy of one layer's state bytes (graph
/// memcpy nodes): what moving those bytes costs per step of a loop.
row state_copy_loop(int B, int H, int D, int reps, double bw) {
  const std::size_t bytes = std::size_t(B) * H * D * D * sizeof(float);
  const int L = loop_layers(bytes);
  char *src = nullptr, *dst = nullptr;
  ok(cudaMalloc(&src, L * bytes), "cudaMalloc");
  ok(cudaMalloc(&dst, L * bytes), "cudaMalloc");
  ok(cudaMemset(src, 1, L * bytes), "cudaMemset");
  const double ms = per_step_ms(L, reps, [&](int l, cudaStream_t s) {
    const cudaError_t e = cudaMemcpyAsync(dst + l * bytes, src + l * bytes, bytes, cudaMemcpyDeviceToDevice, s);
    if (e != cudaSuccess) throw std::runtime_error(std::string("cudaMemcpyAsync: ") + cudaGetErrorString(e));
  });
  cudaFree(src);
  cudaFree(dst);
  return {"state copy, loop of " + std::to_string(L) + " (graph)", B, 1, H, D, ms, 2.0 * double(bytes) / bw * 1e3};
}

/// The inputs of a per-key decay rule (VectorDecay or KDA): x's q, k, v (and beta) with the fp32
/// per-key log gates g [B, T, H, D] in device memory.
template <class Rule, class X>
typename Rule::template inputs<X> per_key_inputs(const gated_delta_buffers<X>& x, float* g) {
  const auto base = x.inputs();
  typename Rule::template inputs<X> in{.q = base.q, .k = base.k, .v = base.v};
  in.g = la::coefficient_view<X, 4>(la::view<float>(g, x.B, x.T, x.H, x.D));
  if constexpr (requires { in.beta; }) in.beta = base.beta;
  return in;
}

/// The inputs of any CUDA rule from x's buffers: q, k, v (bf16 or fp16); a scalar log gate g and
/// beta as x holds them (Longhorn's delta is x's beta, in (0, 1)); per-key log gates from `g`
/// [B, T, H, D] (fp32) where the rule takes them.
template <class Rule, class X>
typename Rule::template inputs<X> rule_inputs(const gated_delta_buffers<X>& x, float* g) {
  if constexpr (Rule::decay == la::decay_kind::vector) {
    return per_key_inputs<Rule>(x, g);
  } else {
    const auto base = x.inputs();
    typename Rule::template inputs<X> in{.q = base.q, .k = base.k, .v = base.v};
    if constexpr (requires { in.g; }) in.g = base.g;
    if constexpr (requires { in.beta; }) in.beta = base.beta;
    if constexpr (requires { in.delta; }) in.delta = base.beta;
    return in;
  }
}

/// The chunkwise forward of a CUDA rule with a scalar gate or none (Hebbian, ScalarDecay, Delta,
/// GatedDelta, Longhorn): q, k, v, g and beta (Longhorn's delta) in X, K = V = D, the final
/// state written (no initial state), as fla's chunk_linear_attn (normalize=False),
/// chunk_simple_gla, chunk_delta_rule and chunk_gated_delta_rule with output_final_state=True.
template <class Rule, class X>
row forward_rule(int B, int T, int H, int D, int reps, double bw) {
  const gated_delta_buffers<X> x(B, T, H, D, 1);
  const auto in = rule_inputs<Rule>(x, nullptr);
  la::options<float> opt;
  opt.final_state = x.states();
  const double ms = median_ms([&] { la::cuda::chunkwise_forward<Rule>(in, x.out(), opt); }, reps);
  int coefficients = 0;  // per-token inputs besides q, k, v
  if constexpr (requires { in.g; }) ++coefficients;
  if constexpr (requires { in.beta; } || requires { in.delta; }) ++coefficients;
  // memory floor: read q, k, v and the coefficients once, write o and the final state once
  const double bytes = double(x.qk) * 4 * sizeof(X) + double(x.tok) * coefficients * sizeof(X) + x.state_bytes();
  return {std::string(Rule::name) + " " + element_name<X>() + " chunkwise", B, T, H, D, ms, bytes / bw * 1e3};
}

/// The chunkwise forward of every CUDA rule with a scalar gate or none at one shape, inputs in X
/// (GatedDelta left out where forward() times the same row).
template <class X>
void forward_every_rule(std::vector<row>& rows, int B, int T, int H, int D, bool gated_delta, int reps, double bw) {
  rows.push_back(forward_rule<la::Hebbian, X>(B, T, H, D, reps, bw));
  rows.push_back(forward_rule<la::ScalarDecay, X>(B, T, H, D, reps, bw));
  rows.push_back(forward_rule<la::Delta, X>(B, T, H, D, reps, bw));
  if (gated_delta) rows.push_back(forward_rule<la::GatedDelta, X>(B, T, H, D, reps, bw));
  rows.push_back(forward_rule<la::Longhorn, X>(B, T, H, D, reps, bw));
}

/// Those rows in bf16 and fp16, at K = V = 128 and 64, on the chunkwise shapes (GatedDelta bf16
/// at 128 is forward()'s row).
template <std::size_t N>
std::vector<row> forward_rules(const int (&shapes)[N][3], int reps, double bw) {
  std::vector<row> rows;
  for (const auto& s : shapes) {
    forward_every_rule<E>(rows, s[0], s[1], s[2], 128, false, reps, bw);
    forward_every_rule<E>(rows, s[0], s[1], s[2], 64, true, reps, bw);
    forward_every_rule<__half>(rows, s[0], s[1], s[2], 128, true, reps, bw);
  }
  return rows;
}

/// A decode call's buffers and inputs for any CUDA rule (B sequences, one token): x's bf16 q, k,
/// v, gates and betas; fp32 per-key log gates `g` [B, 1, H, D] where the rule takes them.
template <class Rule>
struct decode_setup {
  static constexpr bool per_key = Rule::decay == la::decay_kind::vector;
  gated_delta_buffers<> x;
  float* g;
  typename Rule::template inputs<E> in;
  decode_setup(int B, int H, int D)
      : x(B, 1, H, D, per_key ? 13 : 11, per_key),
        g(per_key ? device_random<float>(x.tok * D, 14, fill_kind::log_gate) : nullptr),
        in(rule_inputs<Rule>(x, g)) {}
  ~decode_setup() { cudaFree(g); }
  decode_setup(const decode_setup&) = delete;
  decode_setup& operator=(const decode_setup&) = delete;
  std::string name() const { return std::string(Rule::name) + (per_key ? " bf16+fp32 g" : " bf16") + " decode"; }
};

/// One decode step of any CUDA rule (bf16 inputs, per-key decays with fp32 log gates), timed
/// alone; fp32 states in place.
template <class Rule>
row decode(int B, int H, int D, int reps, double bw) {
  const decode_setup<Rule> d(B, H, D);
  const double ms = median_ms([&] { la::cuda::decode_step<Rule>(d.in, d.x.out(), d.x.states()); }, reps);
  return {d.name(), B, 1, H, D, ms, 2.0 * d.x.state_bytes() / bw * 1e3};  // state read + written
}

/// Decode of any CUDA rule (bf16 inputs, fp32 states in place; per-key decays: fp32 log gates
/// and beta, as decode) in a loop over L layers' states, per step (per_step_ms); the
/// floor is one step's state read and written once.
template <class Rule>
row decode_loop(int B, int H, int D, int reps, double bw) {
  const decode_setup<Rule> d(B, H, D);
  const index_t per = index_t(B) * H * D * D;
  const int L = loop_layers(std::size_t(per) * sizeof(float));
  float* states = device_random<float>(L * per, 17, fill_kind::normal);
  const double ms = per_step_ms(L, reps, [&](int l, cudaStream_t s) {
    la::cuda::decode_step<Rule>(d.in, d.x.out(), la::view(states + l * per, B, H, D, D), {}, s);
  });
  cudaFree(states);
  return {d.name() + ", loop of " + std::to_string(L) + " (graph)", B, 1, H, D, ms, 2.0 * d.x.state_bytes() / bw * 1e3};
}

/// The decode loop of every CUDA rule at one B.
std::vector<row> decode_loops(int B, int H, int D, int reps, double bw) {
  return {decode_loop<la::Hebbian>(B, H, D, reps, bw),     decode_loop<la::ScalarDecay>(B, H, D, reps, bw),
          decode_loop<la::Delta>(B, H, D, reps, bw),       decode_loop<la::GatedDelta>(B, H, D, reps, bw),
          decode_loop<la::Longhorn>(B, H, D, reps, bw),    decode_loop<la::VectorDecay>(B, H, D, reps, bw),
          decode_loop<la::KDA>(B, H, D, reps, bw)};
}

/// The chunkwise forward of a per-key decay rule (VectorDecay / GLA or KDA): bf16 q, k, v with
/// fp32 per-key log gates g [B, T, H, D] (and beta), the final state written (no initial
/// state), as fla's chunk_gla / chunk_kda with output_final_state=True.
template <class Rule>
row forward_per_key(int B, int T, int H, int D, int reps, double bw) {
  const gated_delta_buffers x(B, T, H, D, 15, true);
  float* g = device_random<float>(x.tok * D, 16, fill_kind::log_gate);
  const auto in = per_key_inputs<Rule>(x, g);
  la::options<float> opt;
  opt.final_state = x.states();
  const double ms = median_ms([&] { la::cuda::chunkwise_forward<Rule>(in, x.out(), opt); }, reps);
  cudaFree(g);
  // memory floor: read q, k, v, g (and beta) once, write o and the final state once
  const double bytes = double(x.qk) * 4 * sizeof(E) + double(x.tok) * D * 4 + double(x.tok) * 4 + x.state_bytes();
  return {std::string(Rule::name) + " bf16+fp32 g chunkwise", B, T, H, D, ms, bytes / bw * 1e3};
}

/// The chunkwise backward of a per-key decay rule (VectorDecay / GLA or KDA) as forward_per_key
/// sets it up, as fla's chunk_gla / chunk_kda backward: bf16 dq, dk, dv, fp32 dg [B, T, H, D]
/// (and dbeta); with `with_forward`, the forward and the backward in one timed call.
template <class Rule>
row backward_per_key(int B, int T, int H, int D, int reps, double bw, bool with_forward) {
  const gated_delta_buffers x(B, T, H, D, 15, true);
  float* g = device_random<float>(x.tok * D, 16, fill_kind::log_gate);
  const auto in = per_key_inputs<Rule>(x, g);
  E* dout = device_random<E>(x.qk, 21, fill_kind::normal);
  E *dq, *dk, *dv;
  float *dg, *db;
  for (E** p : {&dq, &dk, &dv}) ok(cudaMalloc(p, std::size_t(x.qk) * sizeof(E)), "cudaMalloc");
  ok(cudaMalloc(&dg, std::size_t(x.tok) * D * sizeof(float)), "cudaMalloc");
  ok(cudaMalloc(&db, std::size_t(x.tok) * sizeof(float)), "cudaMalloc");
  typename Rule::template gradients<E> gr{};
  gr.dq = la::view(dq, B, T, H, D), gr.dk = la::view(dk, B, T, H, D), gr.dv = la::view(dv, B, T, H, D);
  gr.dg = la::coefficient_gradient_view<E, 4>(la::view(dg, B, T, H, D));
  if constexpr (requires { gr.dbeta; }) gr.dbeta = la::coefficient_gradient_view<E, 3>(la::view(db, B, T, H));
  la::options<float> fwd;
  fwd.final_state = x.states();
  const la::tensor_view<const E, 4> grad_out = la::view<const E>(dout, B, T, H, D);
  const double ms = median_ms([&] {
    if (with_forward) la::cuda::chunkwise_forward<Rule>(in, x.out(), fwd);
    la::cuda::chunkwise_backward<Rule>(in, grad_out, gr);
  }, reps);
  for (void* p : {(void*)g, (void*)dout, (void*)dq, (void*)dk, (void*)dv, (void*)dg, (void*)db}) cudaFree(p);
  // memory floor: read q, k, v, dO and g (and beta) once, write their gradients once
  const double bytes = double(x.qk) * 7 * sizeof(E) + double(x.tok) * D * 8 + double(x.tok) * 8;
  return {std::string(Rule::name) + " bf16+fp32 g " + (with_forward ? "fwd+bwd" : "backward"), B, T, H, D, ms,
          bytes / bw * 1e3};
}

/// The same decode step with the states in a pool of 2B slots, sequence n in slot
/// 2(B - 1 - n) + 1 (options::state_indices in host memory: validated on the host and
/// uploaded with the call, no synchronisation); the bytes moved are those of contiguous decode.
row decode_pool(int B, int H, int D, int reps, double bw) {
  const gated_delta_buffers x(2 * B, 1, H, D, 11);  // 2B states: the pool; the first B token rows are used
  const gated_delta_buffers tokens(B, 1, H, D, 12);
  std::vector<std::int32_t> slots(static_cast<std::size_t>(B), 0);
  for (int n = 0; n < B; ++n) slots[std::size_t(n)] = 2 * (B - 1 - n) + 1;
  la::options<float> opt;
  opt.state_indices = la::view(static_cast<const std::int32_t*>(slots.data()), std::size_t(B));
  const auto in = tokens.inputs();
  const double ms = median_ms([&] { la::cuda::decode_step<la::GatedDelta>(in, tokens.out(), x.states(), opt); }, reps);
  return {"GatedDelta bf16 decode, pool", B, 1, H, D, ms, 2.0 * tokens.state_bytes() / bw * 1e3};
}

/// Speculative decoding through the same pool: verify_drafts of 4 draft tokens per sequence
/// with the compact record (the pool read once, nothing of the state's size written), or
/// (`commit`) commit_drafts of all 4 from that record (each slot read and written once). The
/// floor is the state bytes the call must move.
row speculative(int B, int H, int D, int reps, double bw, bool commit) {
  constexpr int drafts = 4;
  const gated_delta_buffers x(2 * B, 1, H, D, 11);
  const gated_delta_buffers tokens(B, drafts, H, D, 13);
  std::vector<std::int32_t> slots(static_cast<std::size_t>(B), 0);
  for (int n = 0; n < B; ++n) slots[std::size_t(n)] = 2 * (B - 1 - n) + 1;
  const std::vector<std::int32_t> accepted(static_cast<std::size_t>(B), drafts);
  la::options<float> opt;
  opt.state_indices = la::view(static_cast<const std::int32_t*>(slots.data()), std::size_t(B));
  float *keys, *updates, *decay;
  const std::size_t rows = std::size_t(B) * drafts * H;
  for (float** p : {&keys, &updates}) ok(cudaMalloc(p, rows * D * sizeof(float)), "cudaMalloc");
  ok(cudaMalloc(&decay, rows * sizeof(float)), "cudaMalloc");
  const la::draft_record<float> rec{la::view(keys, B, drafts, H, D), la::view(updates, B, drafts, H, D),
                                    la::view(decay, B, drafts, H, 1)};
  const auto in = tokens.inputs();
  la::cuda::verify_drafts<la::GatedDelta>(in, tokens.out(), x.states(), rec, opt);
  const double ms = median_ms([&] {
    if (commit) la::cuda::commit_drafts(x.states(), rec, la::view(accepted.data(), accepted.size()), opt);
    else la::cuda::verify_drafts<la::GatedDelta>(in, tokens.out(), x.states(), rec, opt);
  }, reps);
  for (void* p : {(void*)keys, (void*)updates, (void*)decay}) cudaFree(p);
  const double state = double(B) * H * D * D * 4;
  return {commit ? "GatedDelta commit_drafts:4, pool" : "GatedDelta bf16 verify_drafts:4, pool", B, drafts, H, D, ms,
          (commit ? 2.0 : 1.0) * state / bw * 1e3};
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  int reps = 30, only = -1, decode_only = 0, only_dim = 0;
  bool profile_backward = false, profile_per_key = false, recurrent_only = false, rules_only = false,
       training_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json = argv[++i];
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--shape" && i + 1 < argc) only = std::atoi(argv[++i]);  // one chunkwise shape (for profilers)
    else if (a == "--backward") profile_backward = true;                     // ... its backward instead
    else if (a == "--per-key") profile_per_key = true;                       // ... KDA's and VectorDecay's forward (or backward)
    else if (a == "--dim" && i + 1 < argc) only_dim = std::atoi(argv[++i]);  // ... every scalar-gate rule's bf16 forward at K = V = D
    else if (a == "--decode" && i + 1 < argc) decode_only = std::atoi(argv[++i]);  // the decode rows of one B
    else if (a == "--recurrent") recurrent_only = true;                      // the recurrent row alone
    // for the fla comparison, alone or together: the chunkwise forward of every scalar-gate rule
    // (bf16 / fp16, D 128 / 64), and GatedDelta's backward and forward + backward
    else if (a == "--rules") rules_only = true;
    else if (a == "--training") training_only = true;
  }
  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const double bw = copy_bandwidth(reps);
  std::printf("device: %s, %d SMs; copy bandwidth %.2f TB/s (read + write)\n", prop.name, prop.multiProcessorCount, bw / 1e12);
  std::vector<row> rows;
  const int shapes[][3] = {{1, 8192, 16}, {4, 4096, 16}, {8, 2048, 32}, {2, 16384, 16}, {16, 4096, 32}};
  if (decode_only > 0) {  // for profilers: the decode rows of B = decode_only
    rows = {decode<la::GatedDelta>(decode_only, 16, 128, reps, bw), decode<la::KDA>(decode_only, 16, 128, reps, bw),
            state_copy(decode_only, 16, 128, reps, bw), state_copy_loop(decode_only, 16, 128, reps, bw)};
    for (row& r : decode_loops(decode_only, 16, 128, reps, bw)) rows.push_back(std::move(r));
    for (const row& r : rows) std::printf("%s B%d: %.4f ms, %.2fx the floor\n", r.name.c_str(), r.B, r.ms, r.ms / r.floor_ms);
    return 0;
  }
  // the token kernel over a long sequence: a row of the main job, alone with --recurrent
  const auto recurrent_row = [&] { return forward("recurrent", 1, 8192, 16, 128, std::max(3, reps / 10), bw); };
  if (recurrent_only) {
    const row r = recurrent_row();
    std::printf("%s B%d T%d H%d: %.4f ms\n", r.name.c_str(), r.B, r.T, r.H, r.ms);
    return 0;
  }
  if (only >= 0) {
    const auto& s = shapes[only];
    if (profile_per_key && profile_backward) {
      rows.push_back(backward_per_key<la::KDA>(s[0], s[1], s[2], 128, reps, bw, false));
      rows.push_back(backward_per_key<la::VectorDecay>(s[0], s[1], s[2], 128, reps, bw, false));
    } else if (only_dim > 0) {
      forward_every_rule<E>(rows, s[0], s[1], s[2], only_dim, true, reps, bw);
    } else if (profile_per_key) {
      rows.push_back(forward_per_key<la::KDA>(s[0], s[1], s[2], 128, reps, bw));
      rows.push_back(forward_per_key<la::VectorDecay>(s[0], s[1], s[2], 128, reps, bw));
    } else {
      rows.push_back(profile_backward ? backward(s[0], s[1], s[2], 128, reps, bw, false)
                                      : forward("chunkwise", s[0], s[1], s[2], 128, reps, bw));
    }
    for (const row& r : rows) std::printf("%s B%d T%d H%d: %.4f ms\n", r.name.c_str(), s[0], s[1], s[2], r.ms);
    return 0;
  }
  const bool everything = !rules_only && !training_only;
  if (everything || rules_only) {
    for (const auto& s : shapes) rows.push_back(forward("chunkwise", s[0], s[1], s[2], 128, reps, bw));
    for (row& r : forward_rules(shapes, reps, bw)) rows.push_back(std::move(r));
  }
  if (everything) for (const auto& s : shapes) rows.push_back(forward("chunkwise", s[0], s[1], s[2], 128, reps, bw, 1024));
  if (everything || training_only) {
    for (const auto& s : shapes) rows.push_back(backward(s[0], s[1], s[2], 128, reps, bw, false));
    for (const auto& s : shapes) rows.push_back(backward(s[0], s[1], s[2], 128, reps, bw, true));
  }
  if (everything) {
    // fla's mixed precision: bf16 q, k, v with fp32 g and beta (and fp32 dg, dbeta), no conversion pass
    for (const auto& s : shapes) rows.push_back(forward("chunkwise", s[0], s[1], s[2], 128, reps, bw, 0, true));
    for (const auto& s : shapes) rows.push_back(backward(s[0], s[1], s[2], 128, reps, bw, true, true));
    for (const auto& s : shapes) rows.push_back(forward_per_key<la::KDA>(s[0], s[1], s[2], 128, reps, bw));
    for (const auto& s : shapes) rows.push_back(forward_per_key<la::VectorDecay>(s[0], s[1], s[2], 128, reps, bw));
    for (const auto& s : shapes) rows.push_back(backward_per_key<la::KDA>(s[0], s[1], s[2], 128, reps, bw, false));
    for (const auto& s : shapes) rows.push_back(backward_per_key<la::VectorDecay>(s[0], s[1], s[2], 128, reps, bw, false));
    for (const auto& s : shapes) rows.push_back(backward_per_key<la::KDA>(s[0], s[1], s[2], 128, reps, bw, true));
    rows.push_back(recurrent_row());
    for (int B : {1, 8, 32, 64, 256}) {
      rows.push_back(state_copy(B, 16, 128, std::max(reps, 100), bw));
      rows.push_back(decode<la::GatedDelta>(B, 16, 128, std::max(reps, 100), bw));
      rows.push_back(state_copy_loop(B, 16, 128, std::max(reps, 30), bw));
      for (row& r : decode_loops(B, 16, 128, std::max(reps, 30), bw)) rows.push_back(std::move(r));
      rows.push_back(decode_pool(B, 16, 128, std::max(reps, 100), bw));
      rows.push_back(speculative(B, 16, 128, std::max(reps, 100), bw, false));
      rows.push_back(speculative(B, 16, 128, std::max(reps, 100), bw, true));
      rows.push_back(decode<la::KDA>(B, 16, 128, std::max(reps, 100), bw));
      rows.push_back(decode<la::VectorDecay>(B, 16, 128, std::max(reps, 100), bw));
    }
  }

  std::printf("\n%-44s %4s %6s %4s %4s %12s %12s %8s\n", "case", "B", "T", "H", "D", "median ms", "floor ms", "x floor");
  for (const auto& r : rows)
    std::printf("%-44s %4d %6d %4d %4d %12.4f %12.4f %8.2f\n", r.name.c_str(), r.B, r.T, r.H, r.D, r.ms, r.floor_ms,
                r.ms / r.floor_ms);
  // Same-shape ratios: each row whose name contains `part` against the row `baseline(name)`.
  const auto same_shape = [&](const char* part, const char* label, auto&& baseline) {
    std::printf("\n%-44s %6s %6s %4s %12s\n", "ratio (same shape)", "B", "T", "H", (std::string("x ") + label).c_str());
    for (const auto& r : rows) {
      if (r.name.find(part) == std::string::npos) continue;
      const std::string base = baseline(r.name);
      for (const auto& d : rows)
        if (d.name == base && d.B == r.B && d.T == r.T && d.H == r.H && d.D == r.D)
          std::printf("%-44s %6d %6d %4d %12.3f\n", (r.name + " / " + label).c_str(), r.B, r.T, r.H, r.ms / d.ms);
    }
  };
  // Prefix caching: the chunkwise forward writing checkpoints against the same call without.
  same_shape("checkpoints/", "plain", [](const std::string&) { return std::string("GatedDelta bf16 chunkwise"); });
  // Mixed precision: fp32 g and beta against the all-bf16 call of the same shape.
  same_shape("fp32 g,beta", "bf16", [](std::string name) {
    const std::string mixed = "bf16+fp32 g,beta";
    return name.replace(name.find(mixed), mixed.size(), "bf16");
  });
  // Per-key decays: the chunkwise forward against GatedDelta's of the same shape and precision.
  same_shape("fp32 g chunkwise", "GatedDelta",
             [](const std::string&) { return std::string("GatedDelta bf16+fp32 g,beta chunkwise"); });
  // Serving ratios: the speculative calls against one decode step through the pool, per B.
  std::printf("\n%-44s %6s %10s\n", "ratio (same B)", "B", "x decode");
  for (const auto& r : rows) {
    if (r.name.find("_drafts:4") == std::string::npos) continue;
    for (const auto& d : rows)
      if (d.name == "GatedDelta bf16 decode, pool" && d.B == r.B)
        std::printf("%-44s %6d %10.2f\n", (r.name + " / decode").c_str(), r.B, r.ms / d.ms);
  }
  // Decode against a copy of the same bytes, per B: how near the kernel comes to moving its state
  // (a loop's step against a loop of copies, a single call against a single copy).
  std::printf("\n%-44s %6s %10s\n", "ratio (same B)", "B", "x copy");
  const auto in_loop = [](const std::string& name) { return name.find("(graph)") != std::string::npos; };
  for (const auto& r : rows) {
    if (r.name.find(" decode") == std::string::npos || r.name.rfind("state copy", 0) == 0) continue;
    for (const auto& d : rows)
      if (d.name.rfind("state copy", 0) == 0 && d.B == r.B && in_loop(d.name) == in_loop(r.name))
        std::printf("%-44s %6d %10.2f\n", (r.name + " / state copy").c_str(), r.B, r.ms / d.ms);
  }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    std::fprintf(f, "{\"device\": \"%s\", \"copy_bytes_per_s\": %.6e, \"rows\": [\n", prop.name, bw);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      std::fprintf(f, "  {\"name\": \"%s\", \"B\": %d, \"T\": %d, \"H\": %d, \"D\": %d, \"ms\": %.6f, \"floor_ms\": %.6f}%s\n",
                   r.name.c_str(), r.B, r.T, r.H, r.D, r.ms, r.floor_ms, i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
