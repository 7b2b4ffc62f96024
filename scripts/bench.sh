#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: installs missing dependencies, builds the benchmarks (Release) in build/ and
# compares the recurrent, parallel and chunkwise forms on the default shape, ending with a
# summary table, then draws the plots (bench/plot.py -> bench/results/*.png). Extra arguments
# go to the benchmark (e.g. --sweep, --delta, --threads, --decode, --benchmark_filter=...).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target linattn_bench_forms
build/bench/linattn_bench_forms "$@"
if python3 -c "import matplotlib" 2>/dev/null; then
  python3 bench/plot.py
  echo "linattn: plots in bench/results/*.png (from the JSON there; run with --sweep, --delta, --threads, --decode for the others)"
else
  echo "linattn: for the plots, pip install matplotlib, then: python3 bench/plot.py  (writes bench/results/*.png)"
fi
