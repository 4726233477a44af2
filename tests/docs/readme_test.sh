#!/bin/sh
# The README stays true: its quick start holds exactly two commands, .ci/run runs the second, and
# its C++ example is examples/consumer/main.cc verbatim (which install.consumer builds and runs).
# usage: readme_test.sh <source dir>
set -eu
src=$1
readme="$src/README.md"
fail() { echo "readme_test: $*" >&2; exit 1; }

# The first sh block after the "## Quick start" heading.
quick=$(awk '/^## Quick start/{q=1} q&&/^```sh/{f=1;next} f&&/^```/{exit} f{print}' "$readme")
[ "$(printf '%s\n' "$quick" | grep -c .)" = 2 ] || fail "quick start must hold two commands, has: $quick"
second=$(printf '%s\n' "$quick" | sed -n 2p)
grep -q "exec $second\$" "$src/.ci/run" || fail ".ci/run does not run '$second'"
[ -x "$src/$(printf '%s' "$second" | cut -d' ' -f1)" ] || fail "'$second' is not executable"

# The first cpp block.
awk '/^```cpp/{f=1;next} f&&/^```/{exit} f{print}' "$readme" > "${TMPDIR:-/tmp}/mw_readme_$$.cc"
if ! diff -u "$src/examples/consumer/main.cc" "${TMPDIR:-/tmp}/mw_readme_$$.cc"; then
  rm -f "${TMPDIR:-/tmp}/mw_readme_$$.cc"
  fail "README's C++ example differs from examples/consumer/main.cc"
fi
rm -f "${TMPDIR:-/tmp}/mw_readme_$$.cc"
echo "readme_test: quick start and example match"
