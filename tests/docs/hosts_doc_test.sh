#!/bin/sh
# Every Lua example of docs/hosts.md is an inventory mwchaos accepts, and binds the hosts of a
# scenario on simulated hosts h0, h1 and h2 (the slurm ones inside a stand-in allocation).
# usage: hosts_doc_test.sh <mwchaos> <source dir> <scratch dir>
set -eu
mwchaos=$1
src=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
awk -v dir="$work" '/^```lua/{n++; f=1; next} f&&/^```/{f=0; next} f{print > (dir "/hosts" n ".lua")}' \
  "$src/docs/hosts.md"
count=$(ls "$work"/hosts*.lua 2>/dev/null | wc -l)
[ "$count" -ge 4 ] || { echo "docs/hosts.md: $count Lua examples found, expected 4 or more"; exit 1; }
for f in "$work"/hosts*.lua; do
  SLURM_JOB_ID=4242 SLURM_JOB_NODELIST='gpu[01-03]' \
    "$mwchaos" validate --hosts "$f" "$src/scenarios/net_partition_heals.lua" >"$work/out" 2>&1 || {
    echo "docs/hosts.md: example $(basename "$f") is refused:"
    sed 's/^/  /' "$f"
    cat "$work/out"
    exit 1
  }
done
echo "docs/hosts.md: $count inventory example(s) valid and bound"
