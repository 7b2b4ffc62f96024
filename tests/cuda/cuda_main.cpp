// SPDX-License-Identifier: MIT
/// \file
/// Runner of the CUDA tests: without a usable GPU it prints why and exits with 77, which ctest
/// reports as "Skipped" (SKIP_RETURN_CODE), never as passed.
#if !__has_include(<catch2/catch_all.hpp>)
#define CATCH_CONFIG_RUNNER
#endif
#include <cstdio>
#include <string>

#include "../support/catch.hpp"
#include "device_runs.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (!cuda_tests::device_present(why)) {
    std::printf("SKIPPED: no CUDA device available (%s); the CUDA tests ran nothing.\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
