#!/usr/bin/env bash
# What mw_worker's data checks cost (expect.data_intact, docs/scenarios.md "How data is checked"):
# the same scenario run with the checks on and off (data_intact = { off = ... }), in pairs whose
# order alternates, for each pattern and tensor size; per pair the ratio of the world's throughput
# with checks to without (the report's bytes_per_s_before: the whole run after the warm-up), and
# per configuration the median and range of the ratios. The baseline is the run without checks, in
# the same invocation.
# Usage: bench/data_check.sh [build dir (default build/release)] [pairs (default 5)]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build/release}
pairs=${2:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# scenario FILE PATTERN BYTES CHECK: a 4 s scenario of two members of one world, traffic as fast
# as it can go; CHECK is "on" or "off".
scenario() {
  local file=$1 pattern=$2 bytes=$3 check=$4 traffic expect
  case $pattern in
    gather_to_leader) traffic="gather_to_leader { worlds = { \"w1\" }, bytes = \"$bytes\" }" ;;
    ring_allreduce) traffic="ring_allreduce { world = \"w1\", bytes = \"$bytes\" }" ;;
  esac
  expect="{}"
  [ "$check" = off ] && expect='{ data_intact = { off = "the baseline of bench/data_check.sh" } }'
  cat >"$file" <<LUA
scenario {
  name = "data_check",
  duration = "4s",
  worlds = { w1 = {} },
  roles = { a = { worlds = { w1 = 0 } }, b = { worlds = { w1 = 1 } } },
  traffic = { $traffic },
  expect = $expect,
}
LUA
}

printf '%-18s %-6s %5s  %-28s %s\n' pattern bytes pairs "with/without checks" "MB/s without (median)"
for pattern in gather_to_leader ring_allreduce; do
  for bytes in 1MiB 16MiB; do
    dir=$out/$pattern-$bytes
    mkdir -p "$dir"
    scenario "$dir/on.lua" "$pattern" "$bytes" on
    scenario "$dir/off.lua" "$pattern" "$bytes" off
    for i in $(seq 1 "$pairs"); do
      order=(on off)
      ((i % 2 == 0)) && order=(off on)
      for check in "${order[@]}"; do
        "$build/bin/mwchaos" run -q --format json -o "$dir/$check-$i" "$dir/$check.lua" >/dev/null
      done
    done
    python3 - "$dir" "$pairs" "$pattern" "$bytes" <<'PY'
import json, statistics, sys
d, pairs, pattern, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def rate(check, i):
    r = json.load(open(f"{d}/{check}-{i}/{check}/report.json"))
    return r["run"]["worlds"]["w1"]["bytes_per_s_before"]
ratios, base = [], []
for i in range(1, pairs + 1):
    on, off = rate("on", i), rate("off", i)
    ratios.append(on / off)
    base.append(off)
print(f"{pattern:<18} {size:<6} {pairs:>5}  {statistics.median(ratios):.3f} "
      f"({min(ratios):.3f}-{max(ratios):.3f})          {statistics.median(base) / 1e6:.0f}")
PY
  done
done
