#!/usr/bin/env bash
# The chaos harness's own CPU cost: runs scenarios several times and reports, per scenario, the
# harness's CPU seconds against its workers' CPU seconds and the run's wall time (medians and
# ranges over the runs). The workers' CPU is the baseline measured in the same run.
# Usage: bench/harness_overhead.sh [build dir (default build/release)] [runs (default 3)]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build/release}
runs=${2:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for scenario in demo_worker_killed many_worlds; do
  for i in $(seq 1 "$runs"); do
    "$build/bin/mwchaos" run -q --backend gloo --format json -o "$out/$i" \
      "$here/scenarios/$scenario.lua" >/dev/null
  done
  python3 - "$out" "$scenario" "$runs" <<'PY'
import json, statistics, sys
out, name, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
for i in range(1, runs + 1):
    r = json.load(open(f"{out}/{i}/{name}/report.json"))["run"]
    rows.append((r["harness_cpu_s"], r["workers_cpu_s"], r["elapsed_s"], len(r["workers"])))
h = [x[0] for x in rows]; w = [x[1] for x in rows]; e = [x[2] for x in rows]
share = [x[0] / x[2] * 100 for x in rows]
print(f"{name}: {rows[0][3]} workers, {runs} runs")
print(f"  harness CPU   median {statistics.median(h):.3f} s  (range {min(h):.3f}-{max(h):.3f})"
      f" = {statistics.median(share):.2f}% of one core over the run")
print(f"  workers CPU   median {statistics.median(w):.2f} s  (range {min(w):.2f}-{max(w):.2f})")
print(f"  harness/workers CPU ratio median {statistics.median([a / b for a, b in zip(h, w)]):.4f}")
PY
done
