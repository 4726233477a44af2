#!/usr/bin/env bash
# The floor plan (docs/design.md, "Layers"): every folder includes only the folders below it, and
# no source file is over 600 lines. Names each include and each file that breaks a rule.
# usage: tests/floor_plan_test.sh [source root]
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cd "$root"

# folder -> the project folders its sources may include (its own always). Quoted includes only:
# "multiworld/..." is the runtime's public API, which every folder may use.
declare -A may=(
  [runtime/src/base]=""
  [runtime/src/store]="base"
  [runtime/src/backend]="base"
  [runtime/src/gloo]="base backend"
  [runtime/src/nccl]="base backend store"
  [runtime/src/worlds]="base backend store gloo nccl"
  [chaos]="chaos"
  [model]="chaos model"
  [agent]="chaos model agent"
  [harness]="chaos model agent harness"
  [reports]="model reports"
  [mwchaos]="chaos model agent harness reports mwchaos"
)
# The first word of each include path names a folder: runtime/src's for the runtime's folders
# (their include root is runtime/src), the top level's for the rest.
bad=0
for dir in "${!may[@]}"; do
  if [ ! -d "$dir" ]; then
    echo "floor_plan: folder $dir is missing" >&2
    bad=1
    continue
  fi
  own=${dir#runtime/src/}
  allowed=" multiworld $own ${may[$dir]} "
  while IFS= read -r hit; do
    file=${hit%%:*}
    inc=$(sed -n 's/.*#include "\([^"]*\)".*/\1/p' <<<"${hit#*:*:}")
    first=${inc%%/*}
    [ "$first" = "$inc" ] && continue  # a file beside it
    if [[ "$allowed" != *" $first "* ]]; then
      echo "floor_plan: ${hit%%:*}:$(cut -d: -f2 <<<"$hit") includes \"$inc\": $dir may include only${allowed}" >&2
      bad=1
    fi
  done < <(grep -rn '^#include "' "$dir" --include='*.h' --include='*.cc' || true)
done
# The runtime's public headers include only each other.
while IFS= read -r hit; do
  echo "floor_plan: public header includes a private one: $hit" >&2
  bad=1
done < <(grep -rn '^#include "' runtime/include | grep -v '#include "multiworld/' || true)

# Small rooms.
for dir in runtime/src harness model agent reports chaos mwchaos; do
  [ -d "$dir" ] || continue
  while IFS= read -r f; do
    n=$(wc -l <"$f")
    if ((n > 600)); then
      echo "floor_plan: $f has $n lines (600 at most)" >&2
      bad=1
    fi
  done < <(find "$dir" -name '*.cc' -o -name '*.h')
done
if ((bad)); then exit 1; fi
echo "floor_plan: every include points down the layers, and every source file is 600 lines or fewer"
