#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: installs missing dependencies (and matplotlib for the plots), builds the
# benchmarks (Release) in build/ and compares the recurrent, parallel and chunkwise forms on the
# default shape, ending with a summary table and which form wins per rule (then TTT-Linear's
# primal and dual forms, linattn_bench_ttt -> build/bench-results/ttt.json); then draws the plots
# of this run. Results and plots go to build/bench-results/ (bench/results/ holds the reference
# runs quoted in bench/README.md and is not touched). Extra arguments go to the benchmark
# (e.g. --sweep, --delta, --threads, --decode, --raw, --benchmark_filter=...).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --plots
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target linattn_bench_forms linattn_bench_ttt
build/bench/linattn_bench_forms "$@"
# The main job (no arguments) also times TTT-Linear's primal and dual forms (its own executable:
# its inputs and state differ from the other rules').
if [ $# -eq 0 ]; then build/bench/linattn_bench_ttt; fi
if python3 -c "import matplotlib" 2>/dev/null; then
  python3 bench/plot.py build/bench-results
  echo "linattn: results and plots of this run in build/bench-results/ (run with --sweep, --delta, --threads, --decode for the other plots)"
else
  echo "linattn: matplotlib could not be installed; the JSON of this run is in build/bench-results/"
fi
