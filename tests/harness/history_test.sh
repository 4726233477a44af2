#!/usr/bin/env bash
# The operation history (mwchaos run --history; docs/scenarios.md, "The operation history"): off
# by default; on, each built-in role's operations are in the report with the columns the docs
# name, consistent with what the checks found (the dropped message of fixtures/data_drop.lua is
# one `violation` operation at the sequence number run.violations names, and the next operation
# at the leader is the sequence number after the dropped one); the limit holds (full_at_s says
# when it was reached); `mwchaos report` keeps the history as it was; bad --history values are
# usage errors.
# Usage: history_test.sh <mwchaos> <source dir> <scratch dir>
set -uo pipefail
mwchaos=$1
src=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
fix=$src/tests/harness/fixtures
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# run_fixture OUT RC ARGS...: runs mwchaos run -q -o $work/OUT ARGS..., which must exit RC.
run_fixture() {
  local out=$1 want=$2 got rc
  shift 2
  got=$(timeout -s KILL 60 "$mwchaos" run -q -o "$work/$out" "$@" 2>&1)
  rc=$?
  [ "$rc" = "$want" ] || fail "run $*: exit $rc, expected $want; output: $got"
}

# The drop, with room for every operation.
run_fixture full 1 --history 100000 "$fix/data_drop.lua"
python3 - "$work/full/data_drop/report.json" <<'PY' || fail "--history 100000: the history is not as it must be"
import json, sys
r = json.load(open(sys.argv[1]))
errors = []
def want(ok, what):
    if not ok:
        errors.append(what)
h = r["run"]["history"]
want(h["limit"] == 100000, f"limit {h['limit']}")
want(h["columns"] == ["start_s", "end_s", "world", "generation", "op", "peer", "seq", "outcome"],
     f"columns {h['columns']}")
roles = h["roles"]
want(sorted(roles) == ["a", "b", "leader"], f"roles {sorted(roles)}")
for role, x in roles.items():
    want(x["full_at_s"] is None, f"{role}: full at {x['full_at_s']}")
    for o in x["ops"]:
        start, end, world, gen, op, peer, seq, outcome = o
        want(start <= end, f"{role}: {o} ends before it starts")
        want(world in ("w1", "w2") and gen == 1, f"{role}: {o}")
        want((op, peer) == (("recv", 1) if role == "leader" else ("send", 0)), f"{role}: {o}")
# The senders: every sequence number in order, each operation ok but the last (the stop may
# break the world under it).
for role in ("a", "b"):
    ops = roles[role]["ops"]
    want(len(ops) > 50, f"{role}: only {len(ops)} operations")
    want([o[6] for o in ops] == list(range(len(ops))), f"{role}: sequence numbers not 0, 1, ...")
    want(all(o[7] == "ok" for o in ops[:-1]), f"{role}: {[o for o in ops[:-1] if o[7] != 'ok']}")
# The leader: w2 all ok; w1 one violation at the seq run.violations names, then seq + 2.
vs = r["run"]["violations"]
want(len(vs) == 1, f"violations {vs}")
w1 = [o for o in roles["leader"]["ops"] if o[2] == "w1"]
w2 = [o for o in roles["leader"]["ops"] if o[2] == "w2"]
want(all(o[7] == "ok" for o in w2[:-1]), f"leader w2: {[o for o in w2 if o[7] != 'ok']}")
bad = [i for i, o in enumerate(w1) if o[7] == "violation"]
want(len(bad) == 1, f"leader w1 violations: {[w1[i] for i in bad]}")
if bad and vs:
    i = bad[0]
    want(w1[i][6] == vs[0]["seq"], f"the violation's seq {w1[i][6]}, the report's {vs[0]['seq']}")
    # The violation's time is its operation's end, taken when the operation returned (the
    # report rounds it to the ms, the history to the us).
    want(abs(vs[0]["t_s"] - w1[i][1]) <= 0.0006,
         f"the violation at {vs[0]['t_s']}, its operation from {w1[i][0]} to {w1[i][1]}")
    want([o[6] for o in w1[:i + 1]] == list(range(i + 1)), "leader w1: seqs before the drop")
    want(i + 1 < len(w1) and w1[i + 1][6] == w1[i][6] + 2,
         f"leader w1 after the drop: {w1[i + 1:i + 2]}")
ok = sum(o[7] == "ok" for o in roles["leader"]["ops"])
checked = sum(c["ops"] for w in r["run"]["checked"].values() for c in w.values())
# The same operations, but for those that ended at the stop, after the last window was counted.
want(abs(ok - checked) <= 10, f"{ok} ok operations in the history, {checked} checked")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY

# A limit of 10: ten operations per role, and when the eleventh began.
run_fixture small 0 --history 10 "$fix/data_off.lua"
python3 - "$work/small/data_off/report.json" <<'PY' || fail "--history 10: the limit does not hold"
import json, sys
h = json.load(open(sys.argv[1]))["run"]["history"]
bad = {role: (len(x["ops"]), x["full_at_s"]) for role, x in h["roles"].items()
       if len(x["ops"]) != 10 or x["full_at_s"] is None or x["full_at_s"] < x["ops"][0][0]}
if h["limit"] != 10 or bad or not h["roles"]:
    print(f"limit {h['limit']}; roles not as they must be: {bad or h['roles']}")
    sys.exit(1)
PY
# Rewritten by `mwchaos report`, the history is as it was.
cp "$work/small/data_off/report.json" "$work/before.json"
timeout -s KILL 60 "$mwchaos" report -q "$work/small/data_off/report.json" >/dev/null 2>&1
python3 - "$work/before.json" "$work/small/data_off/report.json" <<'PY' ||
import json, sys
a, b = (json.load(open(p))["run"].get("history") for p in sys.argv[1:])
sys.exit(0 if a == b and a is not None else 1)
PY
  fail "mwchaos report changed or dropped the history"

# Off by default: no history in the report.
run_fixture off 0 "$fix/data_off.lua"
python3 -c 'import json, sys; sys.exit("history" in json.load(open(sys.argv[1]))["run"])' \
  "$work/off/data_off/report.json" || fail "a run without --history has a history"

# Bad values: usage errors (exit 2) naming the option.
for args in "--history 0" "--history x" "--history 1000001" "--history"; do
  # shellcheck disable=SC2086
  out=$(timeout -s KILL 30 "$mwchaos" run $args "$fix/data_off.lua" 2>&1)
  rc=$?
  [ "$rc" = 2 ] && grep -q -- "--history" <<<"$out" || fail "run $args: exit $rc, output: $out"
done
out=$(timeout -s KILL 30 "$mwchaos" validate --history 5 "$fix/data_off.lua" 2>&1)
rc=$?
[ "$rc" = 2 ] && grep -q -- "--history is for run" <<<"$out" ||
  fail "validate --history: exit $rc, output: $out"

[ "$failures" = 0 ] && echo "history: all checks passed"
exit $((failures > 0))
