#!/bin/sh
# A program role that joins its world with another heartbeat than the scenario declares: mwchaos
# exits 1 without judging a verdict, and its report names the role, the world, the option and both
# values (docs/scenarios.md, "Program roles"); an option the scenario does not write is the
# program's own (exit 0); a declared op_timeout that differs is an error too. pipeline_app must be
# in PATH.
# usage: program_options_test.sh <mwchaos> <source dir> <scratch dir>
set -u
mwchaos=$1
src=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
"$mwchaos" run -q -o "$work" "$src/tests/harness/fixtures/program_wrong_options.lua" >"$work/out.txt" 2>&1
rc=$?
cat "$work/out.txt"
fail() { echo "FAIL: $*"; exit 1; }
[ "$rc" = 1 ] || fail "exit $rc, expected 1"
report="$work/program_wrong_options/report.json"
[ -f "$report" ] || fail "no report at $report"
# Either program may report its join first: the run ends at the first that differs.
grep -qE "role '(frontend|a)' joined world 's1' with other options" "$report" ||
  fail "the report does not name the role and the world"
for want in "heartbeat_ms: joined with 1000, the scenario declares 500" '"outcome": "harness_error"'; do
  grep -qF "$want" "$report" || fail "the report does not say: $want"
done
# No verdict is computed on a heartbeat the program did not use.
python3 - "$report" <<'PY' || fail "the report holds expectation verdicts"
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(1 if r.get("expectations") else 0)
PY
echo "ok: a program's other heartbeat is named, exit 1, no verdicts"

# An option the scenario does not write binds no program: it passes exactly what is declared
# (the heartbeat) and keeps its own op_timeout (60 s against the harness's default 10 s).
"$mwchaos" run -q -o "$work" "$src/tests/harness/fixtures/program_undeclared_options.lua" \
  >"$work/out2.txt" 2>&1
rc=$?
cat "$work/out2.txt"
[ "$rc" = 0 ] || fail "undeclared op_timeout: exit $rc, expected 0"
grep -q "op_timeout_ms: joined with" "$work/program_undeclared_options/report.json" &&
  fail "undeclared op_timeout: judged anyway"
echo "ok: an undeclared op_timeout is the program's own"

# A declared one that differs stays an error naming both values.
"$mwchaos" run -q -o "$work" "$src/tests/harness/fixtures/program_declared_op_timeout.lua" \
  >"$work/out3.txt" 2>&1
rc=$?
cat "$work/out3.txt"
[ "$rc" = 1 ] || fail "declared op_timeout: exit $rc, expected 1"
grep -qF "op_timeout_ms: joined with 60000, the scenario declares 5000" \
  "$work/program_declared_op_timeout/report.json" || fail "declared op_timeout: not named"
echo "ok: a declared op_timeout that differs is named, exit 1"
