#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# On a GPU machine with no network (torch, nvcc, cmake, nanobind, scikit-build-core and pytest
# installed; Eigen, fla's wheel and fla's tests carried in .eigen, .whl, .fla-tests: prepare.sh):
#   python/tests/gpu/run.sh build   build and install linattn with its CUDA module (build/py-gpu)
#   python/tests/gpu/run.sh test    our tests (python/tests; the CUDA ones run here)
#   python/tests/gpu/run.sh fla     fla's op tests through fla_shim.py, chunk then recurrent
#   python/tests/gpu/run.sh bench   Python-call latency and GPU time, fla and linattn (bench.py)
# Logs go to $OUT when set (the device tool's result folder), else to build/gpu-logs.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$PWD
logs=${OUT:-$root/build/gpu-logs}
mkdir -p "$logs"
export PYTHONUNBUFFERED=1
site=$root/build/gpu-site   # an ignored build output: kept between calls on a warm machine
export PYTHONPATH=$site:$root/python/tests/gpu${PYTHONPATH:+:$PYTHONPATH}

case "${1:-}" in
  build)
    rm -rf "$site" && mkdir -p "$site"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/fla_core-*.whl
    prefix=()
    [ -d /usr/include/eigen3 ] || prefix=(-Ccmake.define.CMAKE_PREFIX_PATH="$root/.eigen")
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install -v --no-index --no-deps --no-build-isolation \
      --target "$site" --upgrade . -Cbuild-dir=build/py-gpu -Ccmake.define.LINATTN_PY_CUDA=ON \
      -Ccmake.define.LINATTN_PY_NATIVE=ON "${prefix[@]}" 2>&1 | tail -n 30 | tee "$logs/build.log"
    python3 -c "import linattn.torch as la; print('cuda module:', la.cuda_available())" | tee -a "$logs/build.log"
    ;;
  test)
    (cd python/tests && python3 -m pytest -q -p no:cacheprovider -rs . 2>&1 | tail -n 60 | tee "$logs/test.log")
    ;;
  fla)
    for shim in chunk recurrent; do
      for t in test_gdn test_delta test_simple_gla test_gla test_linear_attn test_kda; do
        [ -f ".fla-tests/tests/ops/$t.py" ] || continue
        echo "== $t (LINATTN_SHIM=$shim)"
        (cd .fla-tests && LINATTN_SHIM=$shim timeout 900 python3 -m pytest -q -p no:cacheprovider -p fla_shim \
           "tests/ops/$t.py" 2>&1 | tail -n 3) || true
      done
    done 2>&1 | tee "$logs/fla.log"
    ;;
  bench)
    python3 python/tests/gpu/bench.py 2>&1 | tee "$logs/bench.log"
    ;;
  *)
    sed -n '3,9p' "$0"; exit 2 ;;
esac
