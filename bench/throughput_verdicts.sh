#!/usr/bin/env bash
# Evidence for the throughput verdicts (docs/benchmarks.md, "Throughput verdicts on a noisy
# machine"): every scenario of the library whose faults are process or failpoint faults and that
# judges a survivor's throughput, run N times beside two busy-loop CPU hogs, must give no "fail"
# (pass, or inconclusive where the noise cannot be told from a drop); and a scenario whose survivor
# is really slowed (bench/scenarios/slowed_survivor.lua: a delay failpoint cuts its rate to about a
# third) must fail N times out of N, beside the same hogs.
#
# usage: bench/throughput_verdicts.sh [N (default 20)] [build dir (default build/release)] [out dir]
# Prints one row per scenario (pass / inconclusive / fail / other counts, the throughput ratios'
# median and range) and writes the same as JSON to <out dir>/summary.json. Exit 0 when both
# targets hold, 1 when not, 2 on bad usage.
set -uo pipefail
n=${1:-20}
build=${2:-build/release}
out=${3:-$(mktemp -d /tmp/mw-throughput-verdicts.XXXXXX)}
src=$(cd "$(dirname "$0")/.." && pwd)
mwchaos=$build/bin/mwchaos
case $n in '' | *[!0-9]*) echo "usage: $0 [N] [build dir] [out dir]" >&2; exit 2 ;; esac
[ -x "$mwchaos" ] || { echo "$0: $mwchaos is missing: build first" >&2; exit 2; }
scenarios="demo_worker_killed many_worlds nccl_remote_error pipeline_stage_killed
  posix_connect_refused posix_recv_reset posix_send_reset posix_writev_error random_send_errors
  store_link_failure two_faults_at_once worker_paused worker_restarted world_removed_and_added"
files=()
for s in $scenarios; do files+=("$src/scenarios/$s.lua"); done

hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap stop_hogs EXIT
for _ in 1 2; do
  bash -c 'while :; do :; done' &
  hogs+=($!)
done
echo "two CPU hogs running (pids ${hogs[*]}); $n rounds; reports in $out" >&2

for i in $(seq 1 "$n"); do
  echo "round $i/$n: library scenarios" >&2
  "$mwchaos" run -q --backend gloo --format json -o "$out/library/$i" "${files[@]}" >/dev/null
  echo "round $i/$n: slowed survivor" >&2
  "$mwchaos" run -q --format json -o "$out/slowed/$i" "$src/bench/scenarios/slowed_survivor.lua" \
    >/dev/null
done
stop_hogs

python3 - "$out" "$n" <<'PY'
import glob, json, os, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
rows = {}
for kind in ("library", "slowed"):
    for f in sorted(glob.glob(f"{out}/{kind}/*/*/report.json")):
        d = json.load(open(f))
        name = os.path.basename(os.path.dirname(f))
        r = rows.setdefault(name, {"kind": kind, "runs": 0, "pass": 0, "inconclusive": 0,
                                   "fail": 0, "other": 0, "ratios": [], "verdicts": {}})
        r["runs"] += 1
        v = d.get("verdict", "error")
        r["verdicts"][v] = r["verdicts"].get(v, 0) + 1
        for e in d.get("expectations", []):
            if "evidence" not in e:
                continue
            st = e["status"]
            r[st if st in ("pass", "inconclusive", "fail") else "other"] += 1
            if e["evidence"].get("ratio") is not None:
                r["ratios"].append(e["evidence"]["ratio"])
ok = True
print(f"| scenario | runs | throughput verdicts: pass / inconclusive / fail / other | ratio median [min, max] | scenario verdicts |")
print("|---|---|---|---|---|")
for name, r in rows.items():
    rs = r["ratios"]
    med = f"{statistics.median(rs):.3f} [{min(rs):.3f}, {max(rs):.3f}]" if rs else "-"
    print(f"| {name} | {r['runs']} | {r['pass']} / {r['inconclusive']} / {r['fail']} / {r['other']} "
          f"| {med} | {', '.join(f'{k} {c}' for k, c in sorted(r['verdicts'].items()))} |")
    if r["kind"] == "library" and (r["fail"] > 0 or r["other"] > 0):
        ok = False
    if r["kind"] == "slowed" and (r["fail"] != n or r["runs"] != n):
        ok = False
    r["ratios"] = rs
json.dump(rows, open(f"{out}/summary.json", "w"), indent=1)
print(f"\ntargets: library throughput verdicts with no fail, slowed survivor failing {n}/{n}: "
      f"{'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
