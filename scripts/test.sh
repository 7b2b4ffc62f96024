#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs missing dependencies, builds everything (Release) in build/ and runs the whole test
# suite under ctest, then the Python package's tests (scripts/test-python.sh). Extra arguments
# go to cmake's configure step (e.g. -DLINATTN_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
# The CUDA backend and its tests are built when nvcc is there (its tests skip without a GPU).
cuda=()
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then cuda=(-DLINATTN_CUDA=ON); fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" "$@"
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"
scripts/test-python.sh
