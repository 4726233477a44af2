#!/bin/sh
# mwchaos and mw_worker start and run a CPU scenario on a machine without the CUDA libraries,
# even when built with the NCCL backend (they reach CUDA through libmultiworld's run-time loading,
# multiworld/gpu.h):
# - neither names libcudart or libnccl in NEEDED;
# - run through the dynamic loader with only their own libraries (no ld.so.cache, LD_LIBRARY_PATH
#   empty), the loader would load neither (its --list: a RUNPATH or the system's default
#   directories could still lead to them);
# - so run, mwchaos plays a CPU scenario to its verdict (pass), its workers started the same way
#   (a --worker script that execs mw_worker through the loader), with MW_CUDART_LIBRARY and
#   MW_NCCL_LIBRARY naming files that do not exist, so that any attempt to load either fails;
#   and a GPU scenario exits 3 saying it needs a GPU, as on any machine without one.
# usage: cuda_hidden_tools_test.sh <mwchaos> <mw_worker> <source dir> <scratch dir>
set -eu
mwchaos=$1
worker=$2
src=$3
work=$4
fail() { echo "cuda_hidden_tools_test: FAIL: $*" >&2; exit 1; }

# shellcheck source=../support/cuda_hidden.sh
. "$(dirname "$0")/../support/cuda_hidden.sh"

rm -rf "$work"
mkdir -p "$work/libs"
no_cuda_needed "$mwchaos" "$worker" || fail "a tool names NCCL or the CUDA runtime in NEEDED"
# Only the libraries the two programs need, in a directory of their own, never the CUDA ones.
own_libs "$work/libs" "$mwchaos" "$worker"
interp=$(interpreter "$mwchaos")
[ -x "$interp" ] || fail "no dynamic loader found for $mwchaos"
# What the loader loads for each program so: every library found, and neither CUDA library (a
# RUNPATH, which --library-path does not override, could still lead to them).
for f in "$mwchaos" "$worker"; do
  deps=$("$interp" --inhibit-cache --library-path "$work/libs" --list "$f") ||
    fail "$f does not start with the CUDA libraries hidden: $deps"
  case "$deps" in
    *libnccl* | *libcudart* | *"not found"*) fail "$f with the CUDA libraries hidden: $deps" ;;
  esac
done

# The worker the harness starts: mw_worker, through the loader the same way (exec: same process),
# each start counted.
cat >"$work/hidden_worker.sh" <<EOF
#!/bin/sh
echo started >>"$work/workers.log"
exec "$interp" --inhibit-cache --library-path "$work/libs" "$worker" "\$@"
EOF
chmod +x "$work/hidden_worker.sh"

hidden_mwchaos() {
  LD_LIBRARY_PATH="" MW_CUDART_LIBRARY=/nonexistent/libcudart.so \
    MW_NCCL_LIBRARY=/nonexistent/libnccl.so.2 \
    "$interp" --inhibit-cache --library-path "$work/libs" "$mwchaos" "$@"
}

# A CPU scenario with traffic and a fault (three workers, two gloo worlds): it passes.
rc=0
hidden_mwchaos run -q --backend gloo -o "$work/cpu" --worker "$work/hidden_worker.sh" \
  "$src/scenarios/leader_killed.lua" >"$work/cpu.out" 2>&1 || rc=$?
cat "$work/cpu.out"
[ "$rc" = 0 ] || fail "leader_killed with the CUDA libraries hidden: exit $rc, expected 0"
report="$work/cpu/leader_killed/report.json"
[ -s "$report" ] || fail "no report at $report"
grep -q '"verdict": *"pass"' "$report" || fail "the report's verdict is not pass"
grep -q '"gpus": *0' "$report" || fail "the report's environment does not say 0 GPUs"
started=$(wc -l <"$work/workers.log")
[ "$started" -ge 3 ] || fail "$started workers were started through the hidden loader, expected 3"

# A GPU scenario: no GPU is seen, so mwchaos says what is missing and exits 3.
rc=0
hidden_mwchaos run -q -o "$work/gpu" --worker "$work/hidden_worker.sh" \
  "$src/scenarios/nccl_remote_error.lua" >"$work/gpu.out" 2>&1 || rc=$?
cat "$work/gpu.out"
[ "$rc" = 3 ] || fail "nccl_remote_error with the CUDA libraries hidden: exit $rc, expected 3"
grep -q "needs a GPU" "$work/gpu.out" || fail "nccl_remote_error: the output does not say it needs a GPU"
echo "cuda_hidden_tools_test: ok"
