// SPDX-License-Identifier: MIT
/// \file
/// linattn::cuda::chunkwise_backward for every CUDA rule, in float, half and bfloat16, against
/// the CPU chunkwise_backward in float64 on the same rounded inputs (which test_backward.cpp
/// checks against finite differences of the float64 oracle): T not a multiple of the chunk,
/// K != V, grouped value heads, packed batches with empty and one-token sequences, carried
/// state and its gradient, strong gates and large steps; bit-identical repeats; bad calls.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../support/backward_harness.hpp"
#include "../support/catch.hpp"
#include "device_runs.hpp"

namespace {

namespace la = linattn;
using cuda_tests::dtype;

/// fp32 < 1e-4; bf16 < 2e-2; fp16 < 1e-2 (relative, over each gradient as a whole).
double tolerance(dtype t) { return t == dtype::f32 ? 1e-4 : t == dtype::f16 ? 1e-2 : 2e-2; }

struct backward_case {
  const char* name;
  ref::dims d;
  std::vector<std::int64_t> cu;
  cuda_tests::config c;
  bool with_ds1 = true;
};

/// Offsets of n packed sequences of 1 to 41 tokens (lengths in a fixed scattered order).
std::vector<std::int64_t> packed_offsets(int n) {
  std::vector<std::int64_t> cu{0};
  for (int i = 0; i < n; ++i) cu.push_back(cu.back() + 1 + (i * 17) % 41);
  return cu;
}

std::vector<backward_case> backward_cases() {
  const auto cu8 = packed_offsets(8), cu12 = packed_offsets(12), cu20 = packed_offsets(20), cu40 = packed_offsets(40);
  return {
      {"B2 T150 H2 HV4 K64 V128, carried state", {2, 150, 2, 4, 64, 128}, {}, {}},
      {"packed 0,1,33,64,64,200,330 H1 HV3 K128 V64, head-first views, cu on device",
       {1, 330, 1, 3, 128, 64}, {0, 1, 33, 64, 64, 200, 330}, {.head_first = true}},
      {"packed 0,129,129,140 H2 HV2 K64 V64, cu in host memory, no initial state, no final-state gradient",
       {1, 140, 2, 2, 64, 64}, {0, 129, 129, 140}, {.use_s0 = false, .cu_on_device = false}, false},
      {"B1 T77 H1 HV1 K128 V128", {1, 77, 1, 1, 128, 128}, {}, {}},
      {"B3 T300 H2 HV2 K128 V128, many chunks", {3, 300, 2, 2, 128, 128}, {}, {}},
      // enough sequences x value heads (16, 24, 40, 160) that the state passes take wider
      // column blocks. The fp32 passes (fp32 and fp16 inputs) take the narrowest of 16, 32 and
      // 64 columns whose blocks all fit at once: with one, two or three blocks per
      // multiprocessor on a GPU of about 132 (the H100's and H200's), these reach all three
      // widths. The bf16 register passes (scalar and per-key decays) take 2, 4, then 8 groups of
      // 16 columns per block, the first with keys split over 2 warps (backward_state_groups, 108
      // to 170 multiprocessors); the cases with few sequences take 1 group with keys over 4 warps.
      {"packed 8 sequences H1 HV2 K128 V128", {1, int(cu8.back()), 1, 2, 128, 128}, cu8, {}},
      {"packed 12 sequences H1 HV2 K128 V128", {1, int(cu12.back()), 1, 2, 128, 128}, cu12, {}},
      {"packed 20 sequences H1 HV2 K128 V128", {1, int(cu20.back()), 1, 2, 128, 128}, cu20, {}},
      {"packed 40 sequences H2 HV4 K64 V128", {1, int(cu40.back()), 2, 4, 64, 128}, cu40, {}},
  };
}

double err(const std::vector<double>& got, const std::vector<double>& want) { return harness::rel_err(got, want); }

/// Sets beta (Longhorn: its step delta) of every `every`-th token and value head to exactly 0.
void zero_some_betas(ref::problem& p, std::size_t every) {
  for (std::size_t i = 0; i < p.beta.size(); i += every) p.beta[i] = 0.0;
}

template <class Rule>
void check_backward(std::mt19937_64& rng, const backward_case& bc, dtype t, harness::gates g,
                    harness::steps st = harness::steps::usual, std::size_t zero_beta_every = 0) {
  auto p = harness::backward_problem<Rule>(rng, bc.d, g, bc.c.use_s0, bc.cu, st);
  if (zero_beta_every > 0) zero_some_betas(p, zero_beta_every);
  if (bc.c.normalize_qk) {  // rows of q and k of very different lengths
    harness::scale_rows(p.q, bc.d.K, rng, -2.0, 1.5);
    harness::scale_rows(p.k, bc.d.K, rng, -2.0, 1.5);
  }
  cuda_tests::round_inputs(p, t, bc.c.float_coefficients);
  auto s = harness::make_seeds(rng, p, bc.with_ds1);
  cuda_tests::round_values(s.dout, t);
  cuda_tests::round_values(s.ds1, dtype::f32);  // the state gradient is fp32 on the device
  const harness::gradients want =
      harness::run_backward<Rule, double>(harness::bform::chunkwise, p, s, {.normalize_qk = bc.c.normalize_qk});
  const cuda_tests::backward_outcome got = cuda_tests::run_backward<Rule>(p, s.dout, s.ds1, t, bc.c);
  INFO(Rule::name << " chunkwise_backward " << cuda_tests::name(t) << ": " << bc.name);
  CHECK(got.all_written);
  const double tol = tolerance(t);
  const double eq = err(got.dq, want.dq), ek = err(got.dk, want.dk), ev = err(got.dv, want.dv);
  const double e0 = err(got.ds0, want.ds0);
  CHECK(eq < tol);
  CHECK(ek < tol);
  CHECK(ev < tol);
  CHECK(e0 < tol);
  double eg = 0, eb = 0;
  if (!want.dg.empty()) {
    eg = err(got.dg, want.dg);
    CHECK(eg < tol);
  }
  if (!want.dbeta.empty()) {
    eb = err(got.dbeta, want.dbeta);
    CHECK(eb < tol);
  }
  std::printf("error %s chunkwise_backward %s dq %.2e dk %.2e dv %.2e dg %.2e dbeta %.2e ds0 %.2e\n", Rule::name,
              cuda_tests::name(t), eq, ek, ev, eg, eb, e0);
}

}  // namespace

TEMPLATE_TEST_CASE("cuda chunkwise_backward matches the float64 CPU backward", "[cuda][backward]", la::Hebbian,
                   la::ScalarDecay, la::Delta, la::GatedDelta, la::Longhorn, la::VectorDecay, la::KDA) {
  std::mt19937_64 rng(20261124);
  for (dtype t : {dtype::f32, dtype::f16, dtype::bf16})
    for (const auto& bc : backward_cases()) check_backward<TestType>(rng, bc, t, harness::gates::mild);
}

TEMPLATE_TEST_CASE("cuda chunkwise_backward with strong gates and large steps", "[cuda][backward][gates]",
                   la::ScalarDecay, la::Delta, la::GatedDelta, la::Longhorn, la::VectorDecay, la::KDA) {
  std::mt19937_64 rng(31);
  const backward_case bc{"B2 T150 H2 HV4 K64 V128", {2, 150, 2, 4, 64, 128}, {}, {}};
  for (dtype t : {dtype::f32, dtype::bf16}) {
    check_backward<TestType>(rng, bc, t, harness::gates::strong, harness::steps::large);
    check_backward<TestType>(rng, bc, t, harness::gates::weak, harness::steps::large);
  }
}

// Tokens whose beta is exactly 0 write nothing, but dbeta still depends on them: the GPU passes
// hand dY, not dX = diag(beta) dY, from the state passes to pass 4 for this reason.
TEMPLATE_TEST_CASE("cuda chunkwise_backward with some betas exactly 0", "[cuda][backward][gates]", la::Delta,
                   la::GatedDelta, la::Longhorn, la::KDA) {
  std::mt19937_64 rng(53);
  const backward_case bc{"B2 T150 H2 HV4 K64 V128, every 3rd beta 0", {2, 150, 2, 4, 64, 128}, {}, {}};
  for (dtype t : {dtype::f32, dtype::bf16})
    check_backward<TestType>(rng, bc, t, harness::gates::strong, harness::steps::large, 3);
}

TEMPLATE_TEST_CASE("cuda chunkwise_backward with 16-bit q, k, v and float gates, betas and their gradients",
                   "[cuda][backward][mixed]", la::ScalarDecay, la::Delta, la::GatedDelta, la::Longhorn, la::VectorDecay,
                   la::KDA) {
  std::mt19937_64 rng(41);
  const std::vector<backward_case> cases{
      {"B2 T150 H2 HV4 K64 V128, float gates and betas", {2, 150, 2, 4, 64, 128}, {}, {.float_coefficients = true}},
      {"packed 0,1,33,64,64,200,330 H1 HV3 K128 V64, head-first views, float gates and betas",
       {1, 330, 1, 3, 128, 64}, {0, 1, 33, 64, 64, 200, 330}, {.head_first = true, .float_coefficients = true}},
  };
  for (dtype t : {dtype::f16, dtype::bf16})
    for (const auto& bc : cases) check_backward<TestType>(rng, bc, t, harness::gates::strong, harness::steps::large);
}

TEMPLATE_TEST_CASE("cuda chunkwise_backward through options::normalize_qk", "[cuda][backward][qk_norm]", la::Hebbian,
                   la::ScalarDecay, la::Delta, la::GatedDelta, la::Longhorn, la::VectorDecay, la::KDA) {
  std::mt19937_64 rng(61);
  const std::vector<backward_case> cases{
      {"B2 T150 H2 HV4 K64 V128, normalised in the call", {2, 150, 2, 4, 64, 128}, {}, {.normalize_qk = true}},
      {"packed 0,1,33,64,64,200,330 H1 HV3 K128 V64, head-first views, float gates and betas, normalised in the call",
       {1, 330, 1, 3, 128, 64}, {0, 1, 33, 64, 64, 200, 330},
       {.head_first = true, .float_coefficients = true, .normalize_qk = true}},
  };
  for (dtype t : {dtype::f32, dtype::bf16})
    for (const auto& bc : cases) check_backward<TestType>(rng, bc, t, harness::gates::mild);
}

TEMPLATE_TEST_CASE("cuda chunkwise_backward gives the same bits on every call", "[cuda][backward]", la::GatedDelta,
                   la::KDA) {
  std::mt19937_64 rng(3);
  const ref::dims d{2, 200, 2, 4, 128, 64};
  auto p = harness::backward_problem<TestType>(rng, d);
  cuda_tests::round_inputs(p, dtype::bf16);
  auto s = harness::make_seeds(rng, p);
  cuda_tests::round_values(s.dout, dtype::bf16);
  const auto a = cuda_tests::run_backward<TestType>(p, s.dout, s.ds1, dtype::bf16, {});
  const auto b = cuda_tests::run_backward<TestType>(p, s.dout, s.ds1, dtype::bf16, {});
  CHECK(a.dq == b.dq);
  CHECK(a.dk == b.dk);
  CHECK(a.dv == b.dv);
  CHECK(a.dg == b.dg);
  CHECK(a.dbeta == b.dbeta);
  CHECK(a.ds0 == b.ds0);
}

TEST_CASE("cuda chunkwise_backward rejects bad arguments before writing anything", "[cuda][backward]") {
  const std::string host = cuda_tests::bad_backward_call<la::GatedDelta>("host_dq");
  INFO(host);
  CHECK(host.find("linattn::cuda::chunkwise_backward<GatedDelta>: argument 'dq' is not in device memory") != std::string::npos);
  const std::string shape = cuda_tests::bad_backward_call<la::Longhorn>("dv_shape");
  INFO(shape);
  CHECK(shape.find("argument 'dv'") != std::string::npos);
}
