#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The chunkwise backward of this tree against a baseline copy of the tree, on a GPU machine, in
# two calls that each fit the device tool's 10 minutes (the machine keeps the builds between
# calls while it stays warm):
#   bench/cuda/compare_backward.sh build        configure and build this tree's tests and bench and
#                                               the baseline's bench (-j 16), then the CUDA tests,
#                                               compute-sanitizer memcheck on "[backward][gates]" and
#                                               racecheck on the same-bits backward test
#   bench/cuda/compare_backward.sh bench [S ...]  GatedDelta bf16 backward (--shape S --backward
#                                               --reps 10; default shapes 0 and 4), the two trees
#                                               alternately, two rounds, then a side-by-side table
# The baseline is a copy of the tree in the ignored folder .baseline (carried with both calls):
#   mkdir -p .git/info && echo /.baseline/ >> .git/info/exclude
#   mkdir -p .baseline && git archive HEAD | tar -x -C .baseline
# Logs go to $OUT when it is set (the device tool's output folder), else to build-compare/.
set -uo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-build}
new=build-compare
base=build-compare-baseline  # outside .baseline, which a later call's carry replaces
logs=${OUT:-$new}
mkdir -p "$logs" $new $base
gen=""
command -v ninja >/dev/null && gen="-G Ninja"
configure() {  # source dir, build dir
  cmake -S "$1" -B "$2" $gen -DCMAKE_BUILD_TYPE=Release -DLINATTN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLINATTN_BUILD_EXAMPLES=OFF -DLINATTN_NATIVE=OFF >"$2/configure.log" 2>&1 || { tail -30 "$2/configure.log"; exit 1; }
}
if [[ $mode == build ]]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
  configure . $new
  configure .baseline $base
  start=$SECONDS
  cmake --build $new -j 16 --target linattn_cuda_tests linattn_bench_cuda >"$logs/build_new.log" 2>&1 &
  built_new=$!
  cmake --build $base -j 6 --target linattn_bench_cuda >"$logs/build_base.log" 2>&1 &
  built_base=$!
  wait $built_new || { tail -40 "$logs/build_new.log"; exit 1; }
  wait $built_base || { tail -40 "$logs/build_base.log"; exit 1; }
  echo "built in $((SECONDS - start)) s"
  echo "== CUDA tests =="
  ./$new/tests/cuda/linattn_cuda_tests >"$logs/cuda_tests.log" 2>&1
  echo "rc $?"
  grep -v '^error ' "$logs/cuda_tests.log" | tail -4
  echo "largest backward error per input type (any gradient, all rules and cases):"
  awk '/^error / && $3 == "chunkwise_backward" {k=$4; for(i=6;i<=NF;i+=2) if($i>g[k]) g[k]=$i}
       END{for(k in g) printf "  %-12s %.2e\n", k, g[k]}' "$logs/cuda_tests.log" | sort
  echo "== compute-sanitizer memcheck [backward][gates] =="
  compute-sanitizer --tool memcheck ./$new/tests/cuda/linattn_cuda_tests "[backward][gates]" >"$logs/memcheck.log" 2>&1
  tail -3 "$logs/memcheck.log"
  echo "== compute-sanitizer racecheck, the same-bits backward test =="
  compute-sanitizer --tool racecheck ./$new/tests/cuda/linattn_cuda_tests \
    "cuda chunkwise_backward gives the same bits on every call*" >"$logs/racecheck.log" 2>&1
  tail -3 "$logs/racecheck.log"
fi
if [[ $mode == bench ]]; then
  shapes=("${@:2}")
  (( ${#shapes[@]} )) || shapes=(0 4)
  : >"$logs/compare.txt"
  for round in 1 2; do
    for s in "${shapes[@]}"; do
      for tree in new base; do
        dir=$new
        [[ $tree == base ]] && dir=$base
        ms=$(./$dir/bench/cuda/linattn_bench_cuda --shape "$s" --backward --reps 10 | tee -a "$logs/bench_$tree.txt" |
             awk '/GatedDelta/ {for(i=1;i<=NF;i++) if($i ~ /^[0-9.]+$/ && $(i+1) == "ms") print $i}' | head -1)
        echo "$round $s $tree $ms" | tee -a "$logs/compare.txt"
      done
    done
  done
  echo "| shape | new (2 rounds) | base (2 rounds) | new / base |"
  awk '{t[$2" "$3]=t[$2" "$3] (t[$2" "$3]==""?"":" / ") $4; s[$2" "$3]+=$4}
       END{for(k in s) if(k ~ / new$/){split(k,a," "); printf "| %s | %s | %s | %.3f |\n", a[1], t[k], t[a[1]" base"], s[k]/s[a[1]" base"]}}' \
    "$logs/compare.txt" | sort
fi
