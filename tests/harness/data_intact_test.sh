#!/usr/bin/env bash
# The safety verdicts end to end. data_intact (docs/scenarios.md, "How data is checked"): mw_worker
# checks every element its traffic receives; one message corrupted, dropped or repeated at the
# transport (mw/gloo/corrupt, drop, repeat: docs/failpoints.md) fails the verdict of that world,
# naming the operation and what arrived, while every operation succeeds and no world breaks; the
# other world passes with what was checked counted; turned off with a reason, the verdicts are
# skipped. app_checks: a program role's own failed check (a stand-in program, fake_program.cc)
# fails it with the check's detail; checks that hold pass; none reported fails.
# Usage: data_intact_test.sh <mwchaos> <mw_fake_program> <source dir> <scratch dir>
set -uo pipefail
mwchaos=$1
fake=$2
src=$3
work=$4
rm -rf "$work"
mkdir -p "$work/bin"
ln -s "$fake" "$work/bin/mw_fake_program"
export PATH="$work/bin:$PATH"
fix=$src/tests/harness/fixtures
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# judge NAME: the report's data_intact verdicts and the other verdicts' statuses, checked against
# the Python expression rules of the fixture (below); prints what does not hold.
judge() {
  python3 - "$work/$1/$1/report.json" "$1" <<'PY'
import json, re, sys
report, name = sys.argv[1], sys.argv[2]
r = json.load(open(report))
verdicts = r["expectations"]
data = {v["world"]: v for v in verdicts if v["name"].endswith("'s data arrives intact")}
others = [v for v in verdicts if not v["name"].endswith("'s data arrives intact")]
errors = []
def want(ok, what):
    if not ok:
        errors.append(what)
for v in others:  # every operation succeeded: no world broke, nothing else failed
    want(v["status"] == "pass", f"{v['name']}: {v['status']} ({v['message']})")
checked = r["run"]["checked"]
def ops(world):
    return sum(c["ops"] for c in checked.get(world, {}).values())
if name == "data_off":
    v = data.get("w1", {})
    want(v.get("status") == "skipped", f"w1's data_intact: {v}")
    want(v.get("message") == "turned off: this scenario corrupts on purpose", f"w1's message: {v}")
else:
    bad, good = {"data_corrupt": ("w1", "w2"), "data_drop": ("w1", "w2"),
                 "data_repeat": ("l1", "l2")}[name]
    message = {
        "data_corrupt": r"role 'leader', recv seq (\d+) of generation 1 at [0-9.]+ s: from rank 1: "
                        r"1 of 1024 elements wrong; element 1000 is [0-9.e+-]+, not [0-9.e+-]+; "
                        r"\d+ operations \(.*\) received and checked \(leader \d+\) right",
        "data_drop": r"role 'leader', recv seq (\d+) of generation 1 at [0-9.]+ s: from rank 1: "
                     r"the content of its seq (\d+), not seq (\d+) \(seq (\d+) missing\); "
                     r"element 0 is [0-9.e+-]+, not [0-9.e+-]+; "
                     r"\d+ operations \(.*\) received and checked \(leader \d+\) right",
        "data_repeat": r"role 's1', recv seq (\d+) of generation 1 at [0-9.]+ s: from rank 0: "
                       r"the content of its seq (\d+), not seq (\d+) \(an earlier operation's, "
                       r"delivered again\); element 0 is [0-9.e+-]+, not [0-9.e+-]+; "
                       r"\d+ operations \(.*\) received and checked \(s1 \d+\) "
                       r"right",
    }[name]
    v = data.get(bad, {})
    want(v.get("status") == "fail", f"{bad}'s data_intact: {v.get('status')} ({v.get('message')})")
    want(v.get("measured") == "1 violations", f"{bad}'s violations: {v.get('measured')}")
    m = re.fullmatch(message, v.get("message", ""))
    want(m is not None, f"{bad}'s message: {v.get('message')!r} is not {message!r}")
    if m and name == "data_drop":
        seq, found, expected, missing = map(int, m.groups())
        want(found == seq + 1 and expected == seq and missing == seq,
             f"the drop's numbers: {m.groups()}")
    if m and name == "data_repeat":
        seq, found, expected = map(int, m.groups())
        want(found == seq - 1 and expected == seq, f"the repeat's numbers: {m.groups()}")
    want(ops(bad) > 50, f"{bad}: only {ops(bad)} operations checked")
    g = data.get(good, {})
    want(g.get("status") == "pass", f"{good}'s data_intact: {g}")
    want(ops(good) > 50, f"{good}: only {ops(good)} operations checked")
    vs = r["run"]["violations"]
    want(len(vs) == 1 and vs[0]["world"] == bad, f"run.violations: {vs}")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY
}

for name in data_corrupt data_drop data_repeat; do
  run_fixture "$name" 1
  judge "$name" || fail "$name.lua: the report does not show the violation as it happened"
  # JUnit names the failed verdict, and the HTML report lists the violation.
  grep -q "data arrives intact.*<failure\|<failure.*recv seq" "$work/$name/$name/junit.xml" ||
    grep -A1 "data arrives intact" "$work/$name/$name/junit.xml" | grep -q "<failure" ||
    fail "$name.lua: junit.xml has no failed data_intact test case"
  grep -q "<h3>Violations</h3>" "$work/$name/$name/report.html" ||
    fail "$name.lua: report.html lists no violation"
done
run_fixture data_off 0
judge data_off || fail "data_off.lua: the verdict is not skipped with its reason"

# app_checks_check NAME STATUS MESSAGE-REGEX: the app_checks verdict of fixtures/NAME.lua's report.
app_checks_check() {
  python3 - "$work/$1/$1/report.json" "$2" "$3" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
v = [v for v in r["expectations"] if v["name"] == "the programs' own checks hold"]
if len(v) != 1 or v[0]["status"] != sys.argv[2] or not re.fullmatch(sys.argv[3], v[0]["message"]):
    print(f"app_checks verdicts: {v}")
    sys.exit(1)
PY
}
run_fixture app_checks_fail 1
app_checks_check app_checks_fail fail \
  "1 of role 'app' check 'answer' failed, the first at [0-9.]+ s: got 5 wanted 6 \(passed/reported: app answer [0-9]+/[0-9]+\)" ||
  fail "app_checks_fail.lua: the failed check is not named with its detail"
run_fixture app_checks_pass 0
app_checks_check app_checks_pass pass "every check held \(passed/reported: app answer ([0-9]+)/\1\)" ||
  fail "app_checks_pass.lua: checks that held did not pass"
run_fixture app_checks_none 1
app_checks_check app_checks_none fail "no program role reported a check .*nothing was checked" ||
  fail "app_checks_none.lua: a scenario where nothing was checked passed"

[ "$failures" = 0 ] && echo "data_intact: all checks passed"
exit $((failures > 0))
