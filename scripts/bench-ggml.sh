#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Our GatedDelta next to ggml's CPU gated-delta op, in one process (bench/ggml/ggml_compare.cpp):
#   scripts/bench-ggml.sh <ggml source tree> [prefill T]
# The ggml tree is yours to provide (e.g. a clone of github.com/ggml-org/ggml; its op
# GGML_OP_GATED_DELTA_NET is needed). Builds in build-ggml/, with -march=native on both sides.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: scripts/bench-ggml.sh <ggml source tree> [prefill T]}
gen=""
command -v ninja >/dev/null && gen="-G Ninja"
mkdir -p build-ggml
log=build-ggml/build.log
cmake -S . -B build-ggml $gen -DCMAKE_BUILD_TYPE=Release -DLINATTN_GGML_SOURCE="$(realpath "$src")" \
  -DLINATTN_BUILD_TESTS=OFF -DLINATTN_BUILD_EXAMPLES=OFF -DLINATTN_PRECOMPILED=OFF >$log 2>&1 ||
  { tail -30 $log; exit 1; }
cmake --build build-ggml -j "$(nproc)" --target linattn_ggml_compare >>$log 2>&1 || { tail -30 $log; exit 1; }
lscpu | grep -E "Model name|^CPU\(s\)" || true
./build-ggml/bench/linattn_ggml_compare "${2:-2048}"
