#!/usr/bin/env bash
# How long a network fault takes to be in force (docs/benchmarks.md, "Network faults in force"):
# runs each scenario given N times, beside two busy loops unless --load none, and reads from each
# report the fault's acked_s - sent_s (the time from the harness sending the fault to every agent
# having put it in place). Prints one line per run and fault, then per fault kind the count, the
# median, the 90th percentile and the largest, in ms.
#
# usage: bench/fault_ack.sh [--runs N] [--load cpu|none] [--build DIR] SCENARIO.lua...
# Needs root (the scenarios' simulated hosts); exit 77 without. Exit 1 when a run failed (its
# reports are kept in build/fault-ack/ and named) or no report held a network fault put in
# place, 0 otherwise. FAULT_ACK_TSV=FILE keeps the raw lines (scenario, run, kind, ms).
set -uo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$src/build/release runs=10 load=cpu
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --load) load=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
    -*) echo "fault_ack.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "fault_ack.sh: --runs wants a positive number, got '$runs'" >&2; exit 2; }
[[ $load == cpu || $load == none ]] || { echo "fault_ack.sh: --load is cpu or none, got '$load'" >&2; exit 2; }
(($#)) || { echo "fault_ack.sh: name at least one scenario (see --help)" >&2; exit 2; }
for s in "$@"; do [[ -f $s ]] || { echo "fault_ack.sh: no scenario file '$s'" >&2; exit 2; }; done
mwchaos=$build/bin/mwchaos
[[ -x $mwchaos ]] || { echo "fault_ack.sh: $mwchaos is missing: build first" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "fault_ack.sh: skipped: needs root"; exit 77; }
work=$(mktemp -d) hogs=()
trap '((${#hogs[@]})) && kill "${hogs[@]}" 2>/dev/null; cp "$work/acks.tsv" "${FAULT_ACK_TSV:-/dev/null}" 2>/dev/null; rm -rf "$work"' EXIT
if [[ $load == cpu ]]; then
  for _ in 1 2; do (while :; do :; done) & hogs+=($!); done
fi
failed=0
for ((i = 1; i <= runs; i++)); do
  for s in "$@"; do
    name=$(basename "$s" .lua)
    if ! "$mwchaos" run -q -o "$work/run$i" "$s" >"$work/run$i-$name.log" 2>&1; then
      echo "FAILED run $i of $name: $(tail -n 1 "$work/run$i-$name.log")"
      mkdir -p "$src/build/fault-ack" && cp -r "$work/run$i/$name" "$src/build/fault-ack/run$i-$name"
      echo "  its reports: $src/build/fault-ack/run$i-$name"
      failed=1
    fi
    python3 - "$work/run$i/$name/report.json" "$name" "$i" >>"$work/acks.tsv" <<'PY'
import json, sys
path, name, run = sys.argv[1:4]
try:
    faults = json.load(open(path))["run"]["faults"]
except (OSError, ValueError, KeyError):
    sys.exit(0)
for f in faults:
    if f.get("acked_s", -1) >= 0 and f.get("outcome") == "ok":
        print(f"{name}\t{run}\t{f['kind']}\t{(f['acked_s'] - f['sent_s']) * 1000:.0f}")
PY
  done
done
python3 - "$work/acks.tsv" "$load" <<'PY' || failed=1
import os, statistics, sys
path = sys.argv[1]
rows = [l.split("\t") for l in open(path).read().splitlines()] if os.path.exists(path) else []
if not rows:
    sys.exit("fault_ack.sh: no report held a network fault that was put in place")
print(f"load {sys.argv[2]}: time from a fault's sending to its being in force, ms")
print(f"{'kind':<12} {'n':>4} {'median':>7} {'p90':>6} {'max':>6}")
for kind in sorted({r[2] for r in rows}):
    ms = sorted(float(r[3]) for r in rows if r[2] == kind)
    p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))]
    print(f"{kind:<12} {len(ms):>4} {statistics.median(ms):>7.0f} {p90:>6.0f} {ms[-1]:>6.0f}")
PY
exit $failed
