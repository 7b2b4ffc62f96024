// SPDX-License-Identifier: MIT
/// \file
/// Side by side with ggml's CPU gated-delta op (GGML_OP_GATED_DELTA_NET, fp32): the same
/// GatedDelta recurrence (scale 1/sqrt(V), log gates, beta), the same random inputs, one
/// process, interleaved rounds. Built only when CMake is given a ggml source tree
/// (-DLINATTN_GGML_SOURCE=<path>; scripts/bench-ggml.sh); ggml is never a dependency of the
/// library.
///
/// Rows: decode (one token per sequence; ours: decode_step in place; ggml: its op with
/// n_tokens = 1, which reads the state and writes the new one into its output) at B = 1 and
/// B = 32, and prefill of T tokens (ours: chunkwise_forward; ggml: the same op over T tokens,
/// token by token), each on 1 and 2 threads (ggml: a persistent thread pool, as llama.cpp
/// keeps). Before timing, each row checks that both give the same outputs.
#include <ggml-cpu.h>
#include <ggml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <linattn/linattn.hpp>

namespace {

namespace la = linattn;
using la::index_t;

struct row {
  const char* name;
  index_t B, T;
  bool decode;
};

/// Inputs of one row in our layouts ([B, T, H, D], [B, T, H], state [B, H, K, V]).
struct problem {
  index_t B, T, H, D;
  std::vector<float> q, k, v, g, beta, s0;
  problem(index_t b, index_t t, index_t h, index_t d) : B(b), T(t), H(h), D(d) {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const std::size_t tokens = std::size_t(B * T * H);
    q.resize(tokens * D), k.resize(tokens * D), v.resize(tokens * D), g.resize(tokens), beta.resize(tokens);
    s0.resize(std::size_t(B * H * D * D));
    for (float& x : q) x = normal(rng);
    for (float& x : v) x = normal(rng);
    for (float& x : s0) x = 0.05f * normal(rng);
    for (std::size_t i = 0; i < tokens; ++i) {  // unit keys, gates in (-0.7, 0), beta in (0, 1)
      float n2 = 0;
      for (index_t j = 0; j < D; ++j) n2 += (k[i * D + j] = normal(rng)) * k[i * D + j];
      for (index_t j = 0; j < D; ++j) k[i * D + j] /= std::sqrt(n2);
      g[i] = -0.7f / (1.0f + std::exp(-normal(rng) - 2.0f));
      beta[i] = 1.0f / (1.0f + std::exp(-normal(rng)));
    }
  }
  la::GatedDelta::inputs<float> inputs() const {
    return {.q = la::view(q.data(), B, T, H, D), .k = la::view(k.data(), B, T, H, D), .v = la::view(v.data(), B, T, H, D),
            .g = la::view(g.data(), B, T, H), .beta = la::view(beta.data(), B, T, H)};
  }
};

/// One gated_delta_net node over the row's inputs, with a persistent thread pool.
class ggml_gated_delta {
 public:
  ggml_gated_delta(const problem& p, int threads) {
    const std::size_t floats = 4 * p.q.size() + 2 * p.s0.size() + p.g.size() + p.beta.size();
    ggml_init_params ip{floats * sizeof(float) + (std::size_t(64) << 20), nullptr, false};
    ctx_ = ggml_init(ip);
    const auto tensor = [&](const std::vector<float>& x, int64_t a, int64_t b, int64_t c, int64_t d) {
      ggml_tensor* t = ggml_new_tensor_4d(ctx_, GGML_TYPE_F32, a, b, c, d);
      std::copy(x.begin(), x.end(), static_cast<float*>(t->data));
      return t;
    };
    // ggml's [D, H, T, B] is our [B, T, H, D]; its state [V, K, H, B] (per head, row j = value
    // column j) is our [B, H, K, V] transposed per head
    std::vector<float> st(p.s0.size());
    for (index_t bh = 0; bh < p.B * p.H; ++bh)
      for (index_t i = 0; i < p.D; ++i)
        for (index_t j = 0; j < p.D; ++j) st[std::size_t((bh * p.D + j) * p.D + i)] = p.s0[std::size_t((bh * p.D + i) * p.D + j)];
    ggml_tensor* q = tensor(p.q, p.D, p.H, p.T, p.B);
    ggml_tensor* k = tensor(p.k, p.D, p.H, p.T, p.B);
    ggml_tensor* v = tensor(p.v, p.D, p.H, p.T, p.B);
    ggml_tensor* g = tensor(p.g, 1, p.H, p.T, p.B);
    ggml_tensor* beta = tensor(p.beta, 1, p.H, p.T, p.B);
    ggml_tensor* s = tensor(st, p.D, p.D, p.H, p.B);
    out_ = ggml_gated_delta_net(ctx_, q, k, v, g, beta, s, 1);
    graph_ = ggml_new_graph(ctx_);
    ggml_build_forward_expand(graph_, out_);
    ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
    pool_ = ggml_threadpool_new(&tpp);
    plan_ = ggml_graph_plan(graph_, threads, pool_);
    work_.resize(plan_.work_size + 1);
    plan_.work_data = work_.data();
  }
  ggml_gated_delta(const ggml_gated_delta&) = delete;
  ggml_gated_delta& operator=(const ggml_gated_delta&) = delete;
  ~ggml_gated_delta() {
    ggml_threadpool_free(pool_);
    ggml_free(ctx_);
  }
  void run() {
    if (ggml_graph_compute(graph_, &plan_) != GGML_STATUS_SUCCESS) {
      std::fprintf(stderr, "ggml_graph_compute failed\n");
      std::exit(1);
    }
  }
  /// Puts ggml's worker threads to sleep (they poll between graphs otherwise) while the other
  /// side runs, so that on a machine with as many cores as threads the two pools do not compete.
  void pause() { ggml_threadpool_pause(pool_); }
  void resume() { ggml_threadpool_resume(pool_); }
  /// The outputs, [B, T, H, V] (the first part of the op's result).
  const float* outputs() const { return static_cast<const float*>(out_->data); }

 private:
  ggml_context* ctx_ = nullptr;
  ggml_tensor* out_ = nullptr;
  ggml_cgraph* graph_ = nullptr;
  ggml_threadpool* pool_ = nullptr;
  ggml_cplan plan_{};
  std::vector<std::uint8_t> work_;
};

template <class F>
double seconds_per_call(F&& f, int calls) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const index_t H = 16, D = 128;
  const index_t T = argc > 1 ? std::atoi(argv[1]) : 2048;  // prefill length
  const int rounds = 9;
  const row rows[] = {{"decode B=1", 1, 1, true}, {"decode B=32", 32, 1, true}, {"prefill B=1", 1, T, false}};
  ggml_cpu_init();
  std::printf("GatedDelta fp32, H=%lld, K=V=%lld; median of %d interleaved rounds\n", (long long)H, (long long)D, rounds);
  std::printf("%-16s %7s %14s %14s %12s %10s\n", "row", "threads", "ours (us)", "ggml (us)", "ggml / ours", "max diff");
  for (const row& r : rows)
    for (int threads : {1, 2}) {
      const problem p(r.B, r.T, H, D);
      ggml_gated_delta theirs(p, threads);
      std::vector<float> out(std::size_t(p.B * p.T * H * D)), state = p.s0, final_state(p.s0.size());
      la::options<float> opt;
      opt.threads = threads;
      const auto o = la::view(out.data(), p.B, p.T, H, D);
      const auto s = la::view(state.data(), p.B, H, D, D);
      la::options<float> prefill = opt;
      prefill.initial_state = la::view(static_cast<const float*>(p.s0.data()), p.B, H, D, D);
      prefill.final_state = la::view(final_state.data(), p.B, H, D, D);
      const auto ours = [&] {
        if (r.decode) la::decode_step<la::GatedDelta>(p.inputs(), o, s, opt);
        else la::chunkwise_forward<la::GatedDelta>(p.inputs(), o, prefill);
      };
      // the same outputs first (decode: from the same state, before ours moves it)
      ours();
      theirs.run();
      double diff = 0, scale = 0;
      for (std::size_t i = 0; i < out.size(); ++i)
        diff = std::max(diff, double(std::abs(out[i] - theirs.outputs()[i]))), scale = std::max(scale, double(std::abs(out[i])));
      if (!(diff <= 1e-3 * scale)) {
        std::printf("%-16s %7d: outputs differ (max %.3g of %.3g): not the same computation\n", r.name, threads, diff, scale);
        return 1;
      }
      const int calls = r.decode ? (r.B == 1 ? 2000 : 100) : 1;
      std::vector<double> a, b;
      for (int i = 0; i < rounds; ++i) {
        theirs.pause();
        a.push_back(seconds_per_call(ours, calls));
        theirs.resume();
        b.push_back(seconds_per_call([&] { theirs.run(); }, calls));
      }
      const double ta = median(a), tb = median(b);
      std::printf("%-16s %7d %14.1f %14.1f %11.2fx %10.2g\n", r.name, threads, 1e6 * ta, 1e6 * tb, tb / ta, diff / scale);
    }
  return 0;
}
