#!/usr/bin/env bash
# mw_check_cost (bench/check_cost.sh's program) runs each pattern with the checks on and off and
# says how many operations it did; bad arguments exit 2 with the usage. Nothing here counts or
# times anything: bench/check_cost.sh does, under callgrind.
#   check_cost_smoke_test.sh MW_CHECK_COST
set -uo pipefail
prog=$1
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
for pattern in gather_to_leader ring_allreduce; do
  for on in on off; do
    out=$(timeout -s KILL 60 "$prog" "$pattern" 65536 20 "$on" 2>&1)
    rc=$?
    [ "$rc" = 0 ] && [ "$out" = "20 operations" ] || fail "$pattern $on: exit $rc, output: $out"
  done
done
for args in "" "scatter 4096 1 on" "ring_allreduce 2 1 on" "ring_allreduce 4096 1 maybe"; do
  # shellcheck disable=SC2086
  out=$(timeout -s KILL 30 "$prog" $args 2>&1)
  rc=$?
  [ "$rc" = 2 ] && grep -q "usage" <<<"$out" || fail "'$args': exit $rc, output: $out"
done
[ "$failures" = 0 ] && echo "check_cost smoke: all checks passed"
exit $((failures > 0))
