#!/bin/sh
# A program role that joins its world with another heartbeat than the scenario declares: mwchaos
# exits 1 without judging a verdict, and its report names the role, the world, the option and both
# values (docs/scenarios.md, "Program roles"). pipeline_app must be in PATH.
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
