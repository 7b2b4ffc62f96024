#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Everything the CUDA backend needs on a GPU machine, in one call:
#   scripts/cuda-device.sh test    build, run the CUDA tests, then compute-sanitizer memcheck
#                                  and racecheck on a subset
#   scripts/cuda-device.sh bench   build and run bench/cuda (CUDA events), then fla's kernels
#                                  on the same shapes and the our/fla time ratios
#   scripts/cuda-device.sh all     both
#   scripts/cuda-device.sh profile [I ...]  kernel times (ncu) of the chunkwise passes on bench
#                                  shapes I (default 0 and 4)
#   scripts/cuda-device.sh profile-full [I]   ncu --set full of both passes on bench shape I
#   scripts/cuda-device.sh profile-decode [B ...]  decode times and ncu of the token kernel at
#                                  batch B (default 1 and 32)
# Logs go to $OUT when it is set (the device tool's output folder), else to build-cuda-dev/.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
build=build-cuda-dev
logs=${OUT:-$build}  # results; build logs stay in $build
mkdir -p "$logs" $build
gen=""
command -v ninja >/dev/null && gen="-G Ninja"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
cmake -S . -B $build $gen -DCMAKE_BUILD_TYPE=Release -DLINATTN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLINATTN_BUILD_EXAMPLES=OFF -DLINATTN_NATIVE=OFF >"$build/configure.log" 2>&1 || { tail -30 "$build/configure.log"; exit 1; }
status=0
if [[ $mode == test || $mode == all ]]; then
  cmake --build $build -j "$(nproc)" --target linattn_cuda_tests linattn_cuda_compute80_tests >"$build/build_tests.log" 2>&1 ||
    { tail -40 "$build/build_tests.log"; exit 1; }
  echo "== CUDA tests =="
  ./$build/tests/cuda/linattn_cuda_tests 2>&1 >"$logs/cuda_tests.log"
  [[ $? == 0 ]] || status=1
  grep -v '^error ' "$logs/cuda_tests.log" | tail -25
  echo "== CUDA tests of the compute_80 build (PTX compiled by the driver for this GPU) =="
  ./$build/tests/cuda/linattn_cuda_compute80_tests 2>&1 >"$logs/cuda_compute80_tests.log"
  [[ $? == 0 ]] || status=1
  grep -v '^error ' "$logs/cuda_compute80_tests.log" | tail -5
  echo "largest relative error per form and input type (forward: out, state; backward: any gradient),"
  echo "over all rules and cases:"
  awk '/^error / && $3 == "chunkwise_backward" {k=$3" "$4; for(i=6;i<=NF;i+=2) if($i>g[k])g[k]=$i}
       /^error / && $3 != "chunkwise_backward" {k=$3" "$4; if($6>o[k])o[k]=$6; if($8>s[k])s[k]=$8}
       END{for(k in o) printf "  %-20s out %.2e  state %.2e\n", k, o[k], s[k];
           for(k in g) printf "  %-30s gradients %.2e\n", k, g[k]}' "$logs/cuda_tests.log" | sort
  if command -v compute-sanitizer >/dev/null; then
    for tool in memcheck racecheck; do
      echo "== compute-sanitizer --tool $tool (decode, gated-rule, speculative and checkpoint cases) =="
      compute-sanitizer --tool $tool --error-exitcode 9 ./$build/tests/cuda/linattn_cuda_tests "[decode],[gates],[speculative],[checkpoints]" \
        >"$logs/sanitizer_$tool.log" 2>&1
      rc=$?
      tail -4 "$logs/sanitizer_$tool.log"
      [[ $rc == 0 ]] || status=1
    done
  fi
fi
if [[ $mode == profile ]]; then
  (( $# > 1 )) || set -- profile 0 4
  cmake --build $build -j "$(nproc)" --target linattn_bench_cuda >"$build/build_bench.log" 2>&1 || { tail -40 "$build/build_bench.log"; exit 1; }
  for shape in ${@:2}; do
    ncu --clock-control none -k regex:chunk -c 3 --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --section MemoryWorkloadAnalysis ./$build/bench/cuda/linattn_bench_cuda --shape $shape --reps 1 >"$logs/ncu_$shape.txt" 2>&1
    grep -E "chunk_.*kernel<|Duration|Throughput|Achieved Occupancy|Theoretical Occupancy|Stall|Warp Cycles Per Issued|Block Limit" "$logs/ncu_$shape.txt" | sed -E 's/\(chunk_args.*//' | head -60
  done
fi
if [[ $mode == profile-decode ]]; then
  (( $# > 1 )) || set -- profile-decode 1 32
  cmake --build $build -j "$(nproc)" --target linattn_bench_cuda >"$build/build_bench.log" 2>&1 || { tail -40 "$build/build_bench.log"; exit 1; }
  for B in ${@:2}; do
    ./$build/bench/cuda/linattn_bench_cuda --decode "$B" --reps 300
    ncu --clock-control none -k regex:token_kernel -c 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section MemoryWorkloadAnalysis --section WarpStateStats ./$build/bench/cuda/linattn_bench_cuda --decode "$B" --reps 1 \
      >"$logs/ncu_decode_$B.txt" 2>&1
    grep -E "token_kernel<|Duration|Throughput|Occupancy|Registers Per|Warp Cycles Per Issued|Stall" "$logs/ncu_decode_$B.txt" | sed -E 's/\(token_args.*//' | head -24
  done
fi
if [[ $mode == profile-full ]]; then
  cmake --build $build -j "$(nproc)" --target linattn_bench_cuda >"$build/build_bench.log" 2>&1 || { tail -40 "$build/build_bench.log"; exit 1; }
  for k in chunk_state chunk_local; do
    ncu --clock-control none -k regex:$k -c 1 --set full ./$build/bench/cuda/linattn_bench_cuda --shape ${2:-4} --reps 1 \
      >"$logs/ncu_full_$k.txt" 2>&1
  done
fi
if [[ $mode == bench || $mode == all ]]; then
  cmake --build $build -j "$(nproc)" --target linattn_bench_cuda >"$build/build_bench.log" 2>&1 || { tail -40 "$build/build_bench.log"; exit 1; }
  echo "== bench/cuda =="
  ./$build/bench/cuda/linattn_bench_cuda --json "$logs/cuda_bench.json" | tee "$logs/cuda_bench.txt"
  if [[ -d .whl ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
      PYTHONPATH=/tmp/site python3 bench/cuda/fla_compare.py --ours "$logs/cuda_bench.json" | tee "$logs/fla_compare.txt"
  else
    echo "no .whl/ folder: fla comparison skipped (see bench/cuda/README.md)"
  fi
fi
exit $status
