#!/bin/sh
# Every Lua example in docs/scenarios.md is a valid scenario, and the exit codes documented there
# are the ones mwchaos --help prints.
# usage: scenarios_doc_test.sh <mwchaos> <source dir> <scratch dir>
set -eu
mwchaos=$1
src=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
awk -v dir="$work" '/^```lua/{n++; f=1; next} f&&/^```/{f=0; next} f{print > (dir "/example" n ".lua")}' \
  "$src/docs/scenarios.md"
count=$(ls "$work"/example*.lua 2>/dev/null | wc -l)
[ "$count" -ge 1 ] || { echo "no lua examples found in docs/scenarios.md"; exit 1; }
"$mwchaos" validate "$work"/example*.lua
for code in 0 1 2 3 4; do
  "$mwchaos" --help | grep -q "^  $code  " || { echo "--help does not explain exit code $code"; exit 1; }
  grep -q "^| $code |" "$src/docs/scenarios.md" || { echo "docs/scenarios.md does not explain exit code $code"; exit 1; }
done
echo "docs/scenarios.md: $count example(s) valid, exit codes documented"
