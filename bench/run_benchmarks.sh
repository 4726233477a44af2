#!/usr/bin/env bash
# Runs every mw_bench subcommand with its defaults, one after another, printing each table and
# writing one JSON file per run. Builds nothing. `throughput` runs twice: under the default
# scheduler (throughput.json) and, as root, with --fifo (throughput-fifo.json; see
# docs/benchmarks.md for why).
#
#   bench/run_benchmarks.sh [BUILD_DIR] [OUT_DIR]
#     BUILD_DIR  build tree holding bench/mw_bench (default ./build/release)
#     OUT_DIR    where the JSON files go (default ./bench-results)
#   Extra flags for one subcommand: MW_BENCH_THROUGHPUT_FLAGS, MW_BENCH_TWO_WORLDS_FLAGS,
#   MW_BENCH_DETECTION_FLAGS, MW_BENCH_CREATION_FLAGS, MW_BENCH_LATENCY_FLAGS,
#   MW_BENCH_OVERHEAD_FLAGS
#   (e.g. MW_BENCH_THROUGHPUT_FLAGS="--reps 9"; the throughput flags apply to both of its runs).
#
# Exit status: 0 when every subcommand ran (missed targets are reported, not fatal), else the
# first failing subcommand's status.
set -euo pipefail

build_dir=${1:-./build/release}
out_dir=${2:-./bench-results}
bench="$build_dir/bench/mw_bench"
if [[ ! -x "$bench" ]]; then
  echo "run_benchmarks.sh: $bench not found; build it first, e.g." >&2
  echo "  cmake -S . -B $build_dir -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build $build_dir --target mw_bench -j2" >&2
  exit 3
fi
mkdir -p "$out_dir"

echo "mw_bench on $(hostname): nproc $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(uname -sr)"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

status=0
# run LABEL SUBCOMMAND FLAGS: JSON in $out_dir/LABEL.json
run() {
  local label=$1 name=$2 flags=$3
  echo
  echo "=== mw_bench $name $flags ($(date -u +%H:%M:%SZ), load $(cut -d' ' -f1 /proc/loadavg))"
  local start=$SECONDS rc=0
  # shellcheck disable=SC2086  # flags are meant to split
  "$bench" "$name" --json "$out_dir/$label.json" $flags || rc=$?
  echo "=== $name: exit $rc, $((SECONDS - start)) s -> $out_dir/$label.json"
  if [[ $rc -ne 0 && $status -eq 0 ]]; then status=$rc; fi
}

run throughput throughput "${MW_BENCH_THROUGHPUT_FLAGS:-}"
if [[ $(id -u) -eq 0 ]]; then
  run throughput-fifo throughput "--fifo ${MW_BENCH_THROUGHPUT_FLAGS:-}"
else
  echo
  echo "=== mw_bench throughput --fifo: skipped (SCHED_FIFO needs root)"
fi
run two-worlds two-worlds "${MW_BENCH_TWO_WORLDS_FLAGS:-}"
run detection detection "${MW_BENCH_DETECTION_FLAGS:-}"
run creation creation "${MW_BENCH_CREATION_FLAGS:-}"
run latency latency "${MW_BENCH_LATENCY_FLAGS:-}"
run overhead overhead "${MW_BENCH_OVERHEAD_FLAGS:-}"
run telemetry telemetry "${MW_BENCH_TELEMETRY_FLAGS:-}"
exit $status
