#!/bin/sh
# A program built with the NCCL backend needs neither NCCL nor the CUDA runtime until it creates an
# NCCL world: none of the ELF files given names them in NEEDED, nor does nccl_loader_test (ldd),
# and nccl_loader_test's CPU world works with both libraries hidden from the dynamic linker (its
# own libraries only, no ld.so.cache, LD_LIBRARY_PATH empty), where an NCCL world fails with
# kUnavailable naming the CUDA runtime.
# usage: cuda_hidden_test.sh <nccl_loader_test> [ELF file...]
set -eu
test_bin=$1
shift
fail() { echo "cuda_hidden_test: $*" >&2; exit 1; }

for f in "$test_bin" "$@"; do
  [ -n "$f" ] || continue  # a static libmultiworld: its programs are checked
  needed=$(readelf -d "$f" | grep NEEDED || true)
  echo "$f:"
  echo "$needed"
  case "$needed" in
    *libnccl* | *libcudart*) fail "$f names NCCL or the CUDA runtime in NEEDED" ;;
  esac
done
deps=$(ldd "$test_bin")
case "$deps" in *libnccl* | *libcudart*) fail "ldd $test_bin: $deps" ;; esac

# Only the libraries the test needs, in a directory of their own.
libs=$(mktemp -d)
trap 'rm -rf "$libs"' EXIT INT TERM
echo "$deps" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
  ln -s "$lib" "$libs/$(basename "$lib")"
done
interp=$(readelf -l "$test_bin" | sed -n 's/.*interpreter: \(.*\)]/\1/p')
hidden() { LD_LIBRARY_PATH="" "$interp" --inhibit-cache --library-path "$libs" "$test_bin" "$@"; }

hidden -w NoTests "[cpu_only_child]" || fail "a CPU world failed with the CUDA libraries hidden"
hidden -w NoTests "[missing_library_child]" || fail "an nccl world did not fail cleanly"
echo "cuda_hidden_test: ok"
