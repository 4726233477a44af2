#!/usr/bin/env bash
# `.ci/quickstart gpu` on a machine without a GPU: exit 3 at once, with a line that says why,
# and nothing built. A stand-in nvidia-smi that lists no GPU plays a machine whose driver has none
# (so that this test never starts a GPU run on a machine that has one).
#   quickstart_gpu_test.sh SOURCE_DIR WORK_DIR
set -u
src=$1
work=$2
rm -rf "$work"
mkdir -p "$work/bin"
fail() { echo "FAIL: $*"; exit 1; }
cat >"$work/bin/nvidia-smi" <<'SH'
#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
exit 9
SH
chmod +x "$work/bin/nvidia-smi"
out=$(PATH="$work/bin:$PATH" MW_BUILD_ROOT="$work/build" "$src/.ci/quickstart" gpu 2>&1)
rc=$?
echo "$out"
[ "$rc" = 3 ] || fail "exit $rc, want 3"
grep -q "no NVIDIA GPU here: nvidia-smi lists none (NVIDIA-SMI has failed" <<<"$out" || fail "no reason"
grep -q "nothing was built or run (exit 3)" <<<"$out" || fail "does not say nothing ran"
[ ! -e "$work/build" ] || fail "it built something without a GPU"
if ! command -v nvidia-smi >/dev/null 2>&1; then  # the real case of a machine without a driver
  out=$(MW_BUILD_ROOT="$work/build" "$src/.ci/quickstart" gpu 2>&1)
  rc=$?
  [ "$rc" = 3 ] || fail "without nvidia-smi: exit $rc, want 3"
  grep -q "nvidia-smi is not installed" <<<"$out" || fail "without nvidia-smi: no reason: $out"
fi
echo "ok: .ci/quickstart gpu exits 3 without a GPU and says why"
