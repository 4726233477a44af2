#!/usr/bin/env bash
# What mw_worker's data checks cost one operation, counted, not timed (docs/benchmarks.md, "Data
# checks"). mw_check_cost runs under callgrind at two counts of operations, A and B, and each
# count is the difference divided by B - A (joining, threads and exit cancel out):
#   - the checks' instructions per operation, both members' (only inside TrafficCheck's functions:
#     --toggle-collect; exact, the same at every run);
#   - the operation's instructions per operation without the checks (the whole program: the
#     runtime, Gloo's sum and copies; a few percent from run to run, the waits' share);
#   - their ratio, (operation + checks) / operation.
# The kernel's work (the loopback copies) is not counted: the checks' share of a whole operation's
# time is smaller than the share of its instructions printed here.
# Usage: bench/check_cost.sh [BUILD_DIR] [A B]   (default: build/release 10 60)
set -euo pipefail
build=${1:-build/release}
a=${2:-10}
b=${3:-60}
prog=$build/bench/mw_check_cost
[ -x "$prog" ] || { echo "check_cost: no $prog (build it first)" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "check_cost: valgrind is not installed" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# instructions PATTERN BYTES OPS on|off [callgrind option]: the instructions (Ir) of one run.
instructions() {
  local out=$work/cg.$1.$2.$3.$4
  valgrind --tool=callgrind --callgrind-out-file="$out" ${5:+"$5"} "$prog" "$1" "$2" "$3" "$4" \
    >/dev/null 2>"$out.log" || { cat "$out.log" >&2; exit 3; }
  awk '/^summary:/ {print $2}' "$out"
}

# per_op PATTERN BYTES on|off [callgrind option]: instructions per operation, (B - A) apart.
per_op() {
  local lo hi
  lo=$(instructions "$1" "$2" "$a" "$3" ${4:+"$4"})
  hi=$(instructions "$1" "$2" "$b" "$3" ${4:+"$4"})
  echo $(((hi - lo) / (b - a)))
}

printf '%-17s %9s %14s %16s %8s\n' pattern bytes "checks Ir/op" "operation Ir/op" ratio
for pattern in gather_to_leader ring_allreduce; do
  for bytes in 1048576 16777216; do
    check=$(per_op "$pattern" "$bytes" on --toggle-collect='mw::chaos::TrafficCheck::*')
    op=$(per_op "$pattern" "$bytes" off)
    printf '%-17s %9d %14d %16d %8.3f\n' "$pattern" "$bytes" "$check" "$op" \
      "$(echo "($op + $check) / $op" | bc -l)"
  done
done
