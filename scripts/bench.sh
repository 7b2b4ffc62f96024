#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: installs missing dependencies, builds the benchmarks (Release) in build/ and
# compares the recurrent, parallel and chunkwise forms on the default shape, ending with a
# summary table. Extra arguments go to the benchmark (e.g. --sweep, --benchmark_filter=...).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target linattn_bench_forms
build/bench/linattn_bench_forms "$@"
