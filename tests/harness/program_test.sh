#!/usr/bin/env bash
# Program roles (docs/scenarios.md, "Program roles"), end to end with a stand-in program
# (fake_program.cc) that writes the telemetry protocol on fd 3: placeholders and variables reach
# it, its metrics are collected, pause/resume/restart/kill act on it, it is stopped by SIGTERM and
# leaves no process behind; a program that exits before it is ready is a harness error naming the
# role, quickly.
# Usage: program_test.sh <mwchaos> <mw_fake_program> <source dir> <scratch dir>
set -uo pipefail
mwchaos=$1
fake=$2
src=$3
work=$4
rm -rf "$work"
mkdir -p "$work/bin"
ln -s "$fake" "$work/bin/mw_fake_program"
base_path=$PATH
export PATH="$work/bin:$PATH"
fix=$src/tests/harness/fixtures
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fakes() { pgrep -f '^mw_fake_program( |$)' | sort; }
fakes_before=$(fakes)

# The scenario with faults: every expectation holds (no orphan, no hang).
out=$(timeout -s KILL 60 "$mwchaos" run -q -o "$work/out" "$fix/program_roles.lua" 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "program_roles.lua: exit $rc, expected 0; output: $out"
report=$work/out/program_roles/report.json
python3 - "$report" <<'PY' || fail "program_roles.lua: report.json does not show what the program got and did"
import json, sys
r = json.load(open(sys.argv[1]))
run = r["run"]
workers = {}
for w in run["workers"]:
    workers.setdefault(w["role"], []).append(w)
errors = []
def want(ok, what):
    if not ok:
        errors.append(what)
app1, app2 = workers.get("app1", []), workers.get("app2", [])
want(len(app1) == 2, "app1 has two records (restarted): %r" % app1)
want(len(app2) == 1 and app2[0]["exit"] == "killed by SIGKILL", "app2 killed by SIGKILL: %r" % app2)
want(app1 and app1[-1]["exit"] == "exited 0", "app1 stopped by SIGTERM, exited 0: %r" % app1)
want(app1 and app1[-1]["starts"] == 2, "app1 started twice")
want(not any(w["hung"] for ws in workers.values() for w in ws), "nothing hung")
tail = app1[-1]["stdout_tail"] if app1 else ""
port = r["scenario"]["roles"]["app1"]["program"][3]
want(port == "port=${world.w1.port}", "the report keeps the command as written: %r" % port)
for text in ["[addr=127.0.0.1]", "[rank=0]", "[size=1]", "[role=app1]", "role=app1 worlds=w1 fd=3",
             "[opts=gloo/cpu/700/9000]",
             "options=w1:backend=gloo device=cpu heartbeat_ms=700 op_timeout_ms=9000\n",
             "fake: stopped by SIGTERM"]:
    want(text in tail, "app1's stdout tail has %r: %r" % (text, tail))
import re
m = re.search(r"\[port=(\d+)\]", tail)
want(m and int(m.group(1)) > 0, "the port placeholder became a port: %r" % tail)
want(m and ("extra=port-" + m.group(1)) in tail, "env placeholder expanded: %r" % tail)
want(re.search(r"token_length=[1-9]", tail), "the store token reached the program")
want(re.search(r"cwd=/\S*tests/harness/fixtures", tail), "cwd is the scenario's folder: %r" % tail)
series = run.get("series", {})
want("app1" in series.get("w1", {}) and "app2" in series.get("w2", {}),
     "metrics collected from the telemetry pipe: %r" % list(series))
cpu = run.get("cpu", {})
want(all(len(cpu.get(r, {}).get("t_s", [])) >= 5 for r in ("app1", "app2")),
     "the programs' CPU metered from outside every 100 ms: %r" % {k: len(v.get("t_s", [])) for k, v in cpu.items()})
kinds = [f["outcome"] for f in run["faults"]]
want(kinds == ["ok"] * 4, "every fault delivered: %r" % kinds)
want(run.get("leftover_processes", 0) == 0, "no process left")
if errors:
    print("\n".join(errors))
    sys.exit(1)
PY

# A program that exits before it is ready: exit 1 at once, naming the role and its output.
start=$(date +%s)
out=$(timeout -s KILL 30 "$mwchaos" run -q -o "$work/out" "$fix/program_exits_early.lua" 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "program_exits_early.lua: exit $rc, expected 1; output: $out"
grep -q "role 'app' exited 3 before it joined its worlds: stderr: fake: exiting with 3 before ready" \
  <<<"$out$(cat "$work/out/program_exits_early/report.json" 2>/dev/null)" ||
  fail "program_exits_early.lua: no error naming the role; output: $out"
[ $(($(date +%s) - start)) -le 10 ] || fail "program_exits_early.lua took over 10 s"

# A program that never joins its world: the startup limit (1 s here) ends the run with an error
# naming the role and the world; its process and its child are gone.
start=$(date +%s)
out=$(timeout -s KILL 30 "$mwchaos" run -q -o "$work/out" "$fix/program_never_joins.lua" 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "program_never_joins.lua: exit $rc, expected 1; output: $out"
grep -q "roles did not join their worlds within 1 s (startup): app (never joined w1)" <<<"$out" ||
  fail "program_never_joins.lua: no error naming the role and world; output: $out"
[ $(($(date +%s) - start)) -le 10 ] || fail "program_never_joins.lua took over 10 s"

# A failpoint fault on a program whose runtime has no failpoints (it answers "fifo -"): skipped,
# and the report says why.
out=$(timeout -s KILL 30 "$mwchaos" run -q -o "$work/out" "$fix/program_no_failpoints.lua" 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "program_no_failpoints.lua: exit $rc, expected 0; output: $out"
python3 - "$work/out/program_no_failpoints/report.json" <<'PY' || fail "program_no_failpoints.lua: fault not reported as skipped"
import json, sys
faults = json.load(open(sys.argv[1]))["run"]["faults"]
outcome = faults[0]["outcome"]
sys.exit(0 if len(faults) == 1 and outcome.startswith("skipped: the libmultiworld in role 'app'") else 1)
PY

# A program found through an empty PATH entry (mwchaos's current directory, as execvp has it)
# runs from the role's own directory: the validator resolved it to an absolute path.
mkdir -p "$work/cwd"
ln -s "$fake" "$work/cwd/mw_fake_program"
out=$(cd "$work/cwd" && PATH=":$base_path" timeout -s KILL 30 "$mwchaos" run -q \
  -o "$work/out-cwd" "$fix/program_no_failpoints.lua" 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "a program on an empty PATH entry: exit $rc, expected 0; output: $out"

# A role's own time to exit (stop_within): the one that gave itself 4 s exits in 1.5 s and is
# not hung; the one that gave itself 500 ms is killed then, and no_hang names it with its bound.
out=$(timeout -s KILL 30 "$mwchaos" run -q -o "$work/out" "$fix/program_slow_exit.lua" 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "program_slow_exit.lua: exit $rc, expected 1 (hasty hung); output: $out"
grep -q "did not exit within its role's stop_within of being told to stop (killed): hasty (500 ms)" \
  <<<"$out" || fail "program_slow_exit.lua: no_hang does not name hasty and its bound; output: $out"
python3 - "$work/out/program_slow_exit/report.json" <<'PY' || fail "program_slow_exit.lua: the report's workers"
import json, sys
r = json.load(open(sys.argv[1]))
w = {x["role"]: x for x in r["run"]["workers"]}
ok = (w["patient"]["exit"] == "exited 0" and not w["patient"]["hung"] and w["hasty"]["hung"]
      and w["hasty"]["exit"] == "killed by SIGKILL"
      and r["scenario"]["roles"]["patient"]["stop_within_ms"] == 4000)
print(json.dumps({k: (v["exit"], v["hung"]) for k, v in w.items()}))
sys.exit(0 if ok else 1)
PY

# Interrupted while a role takes its time to exit: the first SIGINT ends the run interrupted and
# leaves the role its stop_within (90 s), saying so; the second kills it at once (Ctrl-C never
# waits 90 s for a user who presses it twice), and the report says interrupted, not hung.
"$mwchaos" run -o "$work/long" "$fix/program_stop_long.lua" >"$work/long.out" 2>"$work/long.err" &
pid=$!
for _ in $(seq 1 300); do  # its progress lines begin once the role joined: "[  1.0/60.0s] ..."
  grep -q '^\[ *[0-9.]*/60.0s\]' "$work/long.err" 2>/dev/null && break
  sleep 0.1
done
grep -q '^\[ *[0-9.]*/60.0s\]' "$work/long.err" || fail "program_stop_long.lua: the run never started"
kill -INT "$pid"
for _ in $(seq 1 300); do
  grep -q "interrupt again to kill them now" "$work/long.err" && break
  sleep 0.1
done
grep -qx "mwchaos: interrupted: waiting for the roles to exit (up to 90 s, their stop_within); interrupt again to kill them now" \
  "$work/long.err" || fail "a first SIGINT: no word of the wait; stderr: $(cat "$work/long.err")"
sleep 1
kill -0 "$pid" 2>/dev/null || fail "a first SIGINT: mwchaos did not leave the role its stop_within"
slow_of_this_run() {  # the slow role's process, a descendant of this mwchaos (via its agent)
  local p q
  for p in $(pgrep -f '^mw_fake_program --exit-after-term 120000'); do
    q=$p
    while [ -n "$q" ] && [ "$q" -gt 1 ]; do
      [ "$q" = "$pid" ] && return 0
      q=$(ps -o ppid= -p "$q" | tr -d ' ')
    done
  done
  return 1
}
slow_of_this_run ||
  fail "a first SIGINT: the role was not left its stop_within"
kill -INT "$pid"
ended "a second SIGINT: mwchaos" "$pid" 10
[ "$rc" = 130 ] || fail "a second SIGINT: exit $rc, expected 130; stderr: $(cat "$work/long.err")"
python3 - "$work/long/program_stop_long/report.json" <<'PY' || fail "interrupted twice: the report"
import json, sys
r = json.load(open(sys.argv[1]))
w = r["run"]["workers"]
print(r["outcome"], [(x["role"], x["exit"], x["hung"]) for x in w])
sys.exit(0 if r["outcome"] == "interrupted" and r["run"]["interrupted"] and len(w) == 1
         and w[0]["exit"] == "killed by SIGKILL" and not w[0]["hung"] else 1)
PY

# No process of the fake is left (it runs as its scenarios name it: argv[0] "mw_fake_program";
# one that was running before this test began is another build's).
left=$(comm -13 <(echo "$fakes_before") <(fakes))
[ -z "$left" ] || fail "mw_fake_program processes remain: $left"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "program roles: ok"
