#!/usr/bin/env bash
# data_intact on nccl worlds, on the simulated GPU (tests/runtime/sim_cuda.cc; ctest sets
# MW_CUDART_LIBRARY, MW_NCCL_LIBRARY and MW_SIM_DEVICES): mw_worker fills and checks a device
# tensor through a host mirror (chaos/traffic_check.h, Mirror), so
# - the one-rank all-reduce of fixtures/sim_gpu_traffic.lua passes with its operations counted;
# - one result corrupted, or delivered again in place of the next, inside the simulated NCCL
#   (mw/sim/nccl/corrupt and repeat) fails that world's verdict with the exact message, while the
#   process's other nccl world passes and no world breaks.
# Usage: sim_gpu_data_test.sh <mwchaos> <source dir> <scratch dir>
set -uo pipefail
mwchaos=$1
src=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
fix=$src/tests/harness/fixtures
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
for v in MW_CUDART_LIBRARY MW_NCCL_LIBRARY MW_SIM_DEVICES; do
  [ -n "${!v:-}" ] || { echo "FAIL: $v is not set (run through ctest)"; exit 1; }
done

# judge NAME: the report's data_intact verdicts against what NAME did (below).
judge() {
  python3 - "$work/$1/$1/report.json" "$1" <<'PY'
import json, re, sys
report, name = sys.argv[1], sys.argv[2]
r = json.load(open(report))
errors = []
def want(ok, what):
    if not ok:
        errors.append(what)
verdicts = r["expectations"]
data = {v["world"]: v for v in verdicts if v["name"].endswith("'s data arrives intact")}
for v in verdicts:
    if not v["name"].endswith("'s data arrives intact"):
        want(v["status"] == "pass", f"{v['name']}: {v['status']} ({v['message']})")
checked = r["run"]["checked"]
def ops(world):
    return sum(c["ops"] for c in checked.get(world, {}).values())
good = ["g1"] if name == "sim_gpu_traffic" else ["g2"]
for w in good:
    v = data.get(w, {})
    want(v.get("status") == "pass", f"{w}'s data_intact: {v}")
    want(re.fullmatch(r"\d+ operations \(.*\) received and checked \(p0 \d+\), every element right",
                      v.get("message", "")), f"{w}'s message: {v.get('message')!r}")
    want(ops(w) > 50, f"{w}: only {ops(w)} operations checked")
if name != "sim_gpu_traffic":
    head = (r"role 'p0', all_reduce seq (\d+) of generation 1 at [0-9.]+ s: the sum of 1 members' "
            r"contents: ")
    tail = r"; \d+ operations \(.*\) received and checked \(p0 \d+\) right"
    message = head + {
        "sim_gpu_corrupt": r"1 of 1024 elements wrong; element 1000 is [0-9.e+-]+, not [0-9.e+-]+",
        "sim_gpu_repeat": r"1024 of 1024 elements wrong: the sum of its seq (\d+), not seq (\d+) "
                          r"\(an earlier operation's, delivered again\); element 0 is [0-9.e+-]+, "
                          r"not [0-9.e+-]+",
    }[name] + tail
    v = data.get("g1", {})
    want(v.get("status") == "fail", f"g1's data_intact: {v.get('status')} ({v.get('message')})")
    want(v.get("measured") == "1 violations", f"g1's violations: {v.get('measured')}")
    m = re.fullmatch(message, v.get("message", ""))
    want(m is not None, f"g1's message: {v.get('message')!r} is not {message!r}")
    if m and name == "sim_gpu_repeat":
        seq, found, expected = map(int, m.groups())
        want(found == seq - 1 and expected == seq, f"the repeat's numbers: {m.groups()}")
    want(ops("g1") > 50, f"g1: only {ops('g1')} operations checked")
    vs = r["run"]["violations"]
    want(len(vs) == 1 and vs[0]["world"] == "g1", f"run.violations: {vs}")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY
}

run_fixture sim_gpu_traffic 0
judge sim_gpu_traffic || fail "sim_gpu_traffic.lua: the nccl world's data was not checked as it ran"
for name in sim_gpu_corrupt sim_gpu_repeat; do
  run_fixture "$name" 1
  judge "$name" || fail "$name.lua: the report does not show the violation as it happened"
done

[ "$failures" = 0 ] && echo "sim_gpu_data: all checks passed"
exit $((failures > 0))
