#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Run HERE (a machine with a network and Debian's Eigen) before python/tests/gpu/run.sh goes to a
# GPU machine that has neither: copies what that machine lacks into ignored folders of the
# repository root (.gitignore lists them), to be carried along:
#   .eigen/      Eigen 3.4's headers and CMake package (from libeigen3-dev)
#   .fla-tests/  fla's op tests (tests/ops of a clone of fla given as $1; not part of this repository)
#   .whl/        fla-core's wheel (put there by hand; the GPU image has torch, nanobind, pytest, ...)
set -euo pipefail
cd "$(dirname "$0")/../../.."
rm -rf .eigen && mkdir -p .eigen/include .eigen/share
cp -r /usr/include/eigen3 .eigen/include/
cp -r /usr/share/eigen3 .eigen/share/
if [ -n "${1:-}" ]; then
  rm -rf .fla-tests && mkdir -p .fla-tests
  git -C "$1" archive HEAD tests | tar -x -C .fla-tests
fi
du -sh .eigen .fla-tests .whl 2>/dev/null || true
