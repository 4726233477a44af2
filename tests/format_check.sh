#!/usr/bin/env bash
# Checks that every C++ source of the tree is formatted as .clang-format says (clang-format
# --dry-run -Werror), and names each file that is not. The tree is formatted with clang-format 14
# (Debian 12's); another major version formats some constructs differently, so with one the check
# says so and passes without judging. To format: clang-format -i FILE...
# usage: tests/format_check.sh [clang-format binary]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tool=${1:-clang-format}
want=14
command -v "$tool" >/dev/null || { echo "format_check: $tool is not installed" >&2; exit 1; }
major=$("$tool" --version | sed -n 's/.*clang-format version \([0-9]*\).*/\1/p')
if [ "$major" != "$want" ]; then
  echo "format_check: $tool is version ${major:-unknown}, not the $want the tree is formatted with: not judged"
  exit 0
fi
cd "$here"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cc' '*.h')
else
  mapfile -t files < <(find . -path ./build -prune -o \( -name '*.cc' -o -name '*.h' \) -print)
fi
bad=()
for f in "${files[@]}"; do
  "$tool" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "format_check: ${#bad[@]} of ${#files[@]} files differ from .clang-format (clang-format -i fixes them):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format_check: ${#files[@]} files formatted"
