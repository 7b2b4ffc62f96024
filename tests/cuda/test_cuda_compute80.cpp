// SPDX-License-Identifier: MIT
/// \file
/// The A100 path on whatever GPU is at hand: this program's kernels are built for compute_80
/// alone, so the warp-specialised state pass (sm_90 bulk copies) must not be chosen. The
/// shapes are the ones for which an sm_90 build takes it (sequences x value heads x V/16 up to
/// one or two per multiprocessor); the chunkwise output and final state must match the float64
/// recurrent reference. Had the host picked the Hopper pass, its kernel would trap.
#include <cstdio>
#include <random>
#include <string>

#include "../support/catch.hpp"
#include "../support/harness.hpp"
#include "compute80_runs.hpp"

namespace {

namespace la = linattn;

struct few_heads_case {
  const char* name;
  ref::dims d;
  std::vector<std::int64_t> cu;
};

}  // namespace

TEST_CASE("compute_80 build: no bulk copies", "[cuda][compute80]") { CHECK_FALSE(cuda_tests::bulk_copies_compiled()); }

TEMPLATE_TEST_CASE("compute_80 build: bfloat16 chunkwise on few heads matches the float64 reference", "[cuda][compute80]",
                   la::Hebbian, la::ScalarDecay, la::Delta, la::GatedDelta, la::Longhorn) {
  const few_heads_case cases[] = {
      {"B1 T300 H2 HV4 K64 V128, carried state (16-column units: 32)", {1, 300, 2, 4, 64, 128}, {}},
      {"B3 T200 H4 HV12 K128 V64 (16-column units: 144)", {3, 200, 4, 12, 128, 64}, {}},
      {"packed 0,1,70,250 H1 HV2 K128 V64", {1, 250, 1, 2, 128, 64}, {0, 1, 70, 250}},
  };
  std::mt19937_64 rng(8080);
  for (const auto& sc : cases) {
    auto p = harness::make_problem(rng, sc.d, harness::spec_of<TestType>(), harness::gates::mild, true, sc.cu);
    cuda_tests::round_inputs(p, cuda_tests::dtype::bf16);
    const auto want = ref::run(p);
    const auto got = cuda_tests::compute80::chunkwise_bf16<TestType>(p, {});
    INFO(TestType::name << ": " << sc.name);
    CHECK(got.out_all_written);
    const double e_out = harness::rel_err(got.o, want.o), e_state = harness::rel_err(got.s, want.s);
    CHECK(e_out < 2e-2);  // bfloat16's tolerance, as in the sm_90 program
    CHECK(e_state < 2e-2);
    std::printf("error %s chunkwise bfloat16 (compute_80) out %.2e state %.2e\n", TestType::name, e_out, e_state);
  }
}
