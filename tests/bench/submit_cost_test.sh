#!/usr/bin/env bash
# bench/submit_cost.sh counts what the runtime adds to one stream-ordered operation of an nccl
# world on the simulated GPU (callgrind; docs/benchmarks.md, "Submission, counted"). Counted,
# not timed, so exact enough to hold to:
#   - no libfiu lookup per operation in a process that never switched a failpoint (each was a
#     lookup under two shared read locks; base/failpoint.h);
#   - at most 1.5 C++ allocations per operation more than the raw NCCL baseline (the WorkState,
#     and the world's list of operations in flight growing a node now and then).
# The instruction counts are not held to anything: they depend on how often the threads that
# wait (the completer's polling, the simulated GPU's streams) ran, which a loaded machine moves by
# thousands per operation (beside two busy loops, 3101 to 18741 for the raw baseline's; hunt 19).
# And mw_submit_cost's bad arguments exit 2 with its usage; --help prints the script's.
#   submit_cost_test.sh BUILD_DIR
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$1
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
out=$(timeout -s KILL 300 "$here/bench/submit_cost.sh" "$build" 50 250 2>&1)
rc=$?
echo "$out"
[ "$rc" = 0 ] || fail "submit_cost.sh exited $rc"
# "label ... raw runtime added": the added column of a row.
added() { awk -v l="$1" 'index($0, l) == 1 { print $NF }' <<<"$out"; }
lookups=$(added "libfiu lookups")
allocs=$(added "C++ allocations")
[ "$lookups" = "0.00" ] || fail "libfiu lookups added per operation: '$lookups', want 0.00"
awk -v a="$allocs" 'BEGIN { exit !(a != "" && a <= 1.5) }' ||
  fail "C++ allocations added per operation: '$allocs', want at most 1.5"
"$here/bench/submit_cost.sh" --help | grep -q '^Usage: bench/submit_cost.sh' ||
  fail "submit_cost.sh --help prints no usage"
for args in "" "runtime" "runtime 0" "sometimes 10" "raw 10 extra"; do
  # shellcheck disable=SC2086
  o=$(timeout -s KILL 30 "$build/bench/mw_submit_cost" $args 2>&1)
  r=$?
  [ "$r" = 2 ] && grep -q "usage" <<<"$o" || fail "mw_submit_cost '$args': exit $r, output: $o"
done
[ "$failures" = 0 ] && echo "submit_cost: all checks passed"
exit $((failures > 0))
