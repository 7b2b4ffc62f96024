#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# On a GPU machine: the CUDA tests of this tree, then its CUDA benchmark and that of an older
# revision, alternately (two rounds), and both against fla in the same session. The older
# revision is a source copy in .baseline/, made beforehand where git is:
#   mkdir -p .baseline && git archive <rev> | tar -x -C .baseline
# (carry .baseline and .whl to the GPU machine). Logs go to $OUT when set, else build-cuda-dev/.
set -uo pipefail
cd "$(dirname "$0")/.."
[[ -f .baseline/CMakeLists.txt ]] || { echo "no .baseline/: see the comment at the top" >&2; exit 2; }
export PYTHONUNBUFFERED=1
final=${OUT:-build-cuda-dev}
logs=$(mktemp -d)
gen=""; command -v ninja >/dev/null && gen="-G Ninja"
(cmake -S .baseline -B build-base $gen -DCMAKE_BUILD_TYPE=Release -DLINATTN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
   -DLINATTN_BUILD_EXAMPLES=OFF -DLINATTN_BUILD_TESTS=OFF -DLINATTN_NATIVE=OFF >"$logs/base_cfg.log" 2>&1 &&
 cmake --build build-base -j 6 --target linattn_bench_cuda >"$logs/base_build.log" 2>&1; echo "baseline build rc $?") &
OUT=$logs scripts/cuda-device.sh test
wait
echo "== bench: this tree / baseline, alternately =="
cmake --build build-cuda-dev -j "$(nproc)" --target linattn_bench_cuda >"$logs/bench_build.log" 2>&1 || tail -20 "$logs/bench_build.log"
for i in 1 2; do
  ./build-cuda-dev/bench/cuda/linattn_bench_cuda --json "$logs/new_$i.json" >"$logs/new_$i.txt" 2>&1
  ./build-base/bench/cuda/linattn_bench_cuda --json "$logs/base_$i.json" >"$logs/base_$i.txt" 2>&1
done
cat "$logs/new_2.txt"; echo "-- baseline --"; cat "$logs/base_2.txt"
if [[ -d .whl ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  PYTHONPATH=/tmp/site python3 bench/cuda/fla_compare.py --ours "$logs/new_2.json" >"$logs/fla_new.txt" 2>&1
  PYTHONPATH=/tmp/site python3 bench/cuda/fla_compare.py --ours "$logs/base_2.json" >"$logs/fla_base.txt" 2>&1
  tail -25 "$logs/fla_new.txt"; echo "-- baseline vs fla --"; tail -25 "$logs/fla_base.txt"
fi
mkdir -p "$final"
cp "$logs"/cuda_tests.log "$logs"/new_[12].txt "$logs"/base_2.json "$logs"/new_2.json "$logs"/fla_*.txt "$final"/ 2>/dev/null
