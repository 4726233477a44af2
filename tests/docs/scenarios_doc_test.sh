#!/bin/sh
# Every Lua example in docs/scenarios.md is a valid scenario, and the exit codes documented there
# are the ones mwchaos --help prints; `mwchaos list` names the same program-role placeholders as
# docs/scenarios.md and says, as the docs do, that runtime failpoints work on program roles.
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
list=$("$mwchaos" list)
doc_placeholders=$(grep -o '^| `${world[.]NAME[.][a-z_]*}`' "$src/docs/scenarios.md" | sed 's/.*NAME[.]//; s/}`//' | sort)
list_placeholders=$(printf '%s\n' "$list" | grep -o '${world[.]W[.][a-z_]*}' | sed 's/.*W[.]//; s/}//' | sort)
[ -n "$doc_placeholders" ] || { echo "no \${world.NAME.*} placeholders found in docs/scenarios.md"; exit 1; }
[ "$doc_placeholders" = "$list_placeholders" ] || {
  echo "placeholders differ: docs/scenarios.md: $(echo $doc_placeholders); mwchaos list: $(echo $list_placeholders)"
  exit 1
}
grep -q 'runtime\s*failpoints.*work on it\|`failpoint` and `clear_failpoint` with the runtime' "$src/docs/scenarios.md" ||
  { echo "docs/scenarios.md no longer says runtime failpoints work on program roles"; exit 1; }
printf '%s\n' "$list" | grep -q 'runtime failpoints' ||
  { echo "mwchaos list does not say runtime failpoints work on program roles"; exit 1; }
if printf '%s\n' "$list" | grep -q 'add_world or failpoints'; then
  echo "mwchaos list says program roles take no failpoints; docs/scenarios.md says runtime ones work"
  exit 1
fi
echo "docs/scenarios.md: $count example(s) valid, exit codes documented, list agrees on program roles"
