#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs missing dependencies, builds everything (Release) in build/ and runs the whole test
# suite under ctest. Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"
