# shellcheck shell=sh
# Sourced by the tests that run programs with the CUDA libraries hidden from the dynamic linker
# (tests/runtime/cuda_hidden_test.sh, tests/harness/cuda_hidden_tools_test.sh). Their variables
# are global, as in any sh function.

# no_cuda_needed FILE...: prints each ELF file's NEEDED entries; returns 1, saying which file,
# when one names NCCL or the CUDA runtime. Empty arguments are skipped (a static libmultiworld:
# its programs are checked).
no_cuda_needed() {
  for f in "$@"; do
    [ -n "$f" ] || continue
    needed=$(readelf -d "$f" | grep NEEDED || true)
    echo "$f:"
    echo "$needed"
    case "$needed" in
      *libnccl* | *libcudart*)
        echo "$f names NCCL or the CUDA runtime in NEEDED" >&2
        return 1
        ;;
    esac
  done
}

# own_libs DIR FILE...: links into DIR the libraries the dynamic linker finds for the files (ldd),
# never NCCL or the CUDA runtime, for running them with `ld.so --library-path DIR`.
own_libs() {
  dir=$1
  shift
  for f in "$@"; do
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
  done | sort -u | while read -r lib; do
    case "$lib" in
      *libnccl* | *libcudart*) ;;
      *) ln -sf "$lib" "$dir/$(basename "$lib")" ;;
    esac
  done
}

# interpreter FILE: the dynamic loader FILE names (PT_INTERP).
interpreter() { readelf -l "$1" | sed -n 's/.*interpreter: \(.*\)]/\1/p'; }
