#!/bin/sh
# Installs the build into a temporary prefix, then builds and runs examples/consumer against it
# with find_package(multiworld).
# usage: consumer_test.sh <source dir> <build dir>
set -eu
src=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/examples/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
out=$("$tmp/consumer/consumer")
echo "$out"
case "$out" in
  *"ok, values 1 2 3 4"*) exit 0 ;;
  *) echo "consumer_test: unexpected output" >&2; exit 1 ;;
esac
