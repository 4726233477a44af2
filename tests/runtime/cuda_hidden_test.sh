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
# shellcheck source=../support/cuda_hidden.sh
. "$(dirname "$0")/../support/cuda_hidden.sh"

no_cuda_needed "$test_bin" "$@" || fail "a file names NCCL or the CUDA runtime in NEEDED"
deps=$(ldd "$test_bin")
case "$deps" in *libnccl* | *libcudart*) fail "ldd $test_bin: $deps" ;; esac

# Only the libraries the test needs, in a directory of their own.
libs=$(mktemp -d)
trap 'rm -rf "$libs"' EXIT INT TERM
own_libs "$libs" "$test_bin"
interp=$(interpreter "$test_bin")
hidden() { LD_LIBRARY_PATH="" "$interp" --inhibit-cache --library-path "$libs" "$test_bin" "$@"; }

hidden -w NoTests "[cpu_only_child]" || fail "a CPU world failed with the CUDA libraries hidden"
hidden -w NoTests "[missing_library_child]" || fail "an nccl world did not fail cleanly"
echo "cuda_hidden_test: ok"
