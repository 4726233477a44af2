#!/usr/bin/env bash
# `.ci/quickstart demo` and `test` on a disk without room for them: exit 1 at once, before
# anything is installed or built, with a line that names the folder, what it has and what is
# needed. A stand-in df on PATH plays a file system with 1 GiB free (the CI run this guards
# against failed 195 s in, in pip, with an empty log: the disk was full).
#   quickstart_disk_test.sh SOURCE_DIR WORK_DIR
set -u
src=$1
work=$2
rm -rf "$work"
mkdir -p "$work/bin"
fail() { echo "FAIL: $*"; exit 1; }
cat >"$work/bin/df" <<'SH'
#!/bin/sh
# df -Pk DIR: 1 GiB free of 100 GiB, whatever DIR is.
last=""
for a in "$@"; do last=$a; done
echo "Filesystem 1024-blocks Used Available Capacity Mounted on"
echo "/dev/small 104857600 103809024 1048576 99% $last"
SH
chmod +x "$work/bin/df"
# Nothing may be installed or configured first: stand-ins for apt-get and cmake note any call.
for tool in apt-get cmake; do
  printf '#!/bin/sh\necho "%s was run: $*" >>"%s"\nexit 1\n' "$tool" "$work/ran" >"$work/bin/$tool"
  chmod +x "$work/bin/$tool"
done
for cmd in demo test; do
  out=$(PATH="$work/bin:$PATH" MW_BUILD_ROOT="$work/build-$cmd" "$src/.ci/quickstart" "$cmd" 2>&1)
  rc=$?
  echo "$out"
  [ "$rc" = 1 ] || fail "$cmd: exit $rc, want 1"
  grep -q "quickstart: the $cmd.* needs about [0-9]* GiB free on the file system of $work/build-$cmd; it has 1 GiB" <<<"$out" ||
    fail "$cmd: the line does not name what, where, and how much"
  [ ! -e "$work/ran" ] || fail "$cmd: $(cat "$work/ran") before the disk was checked"
  [ -z "$(ls -A "$work/build-$cmd")" ] || fail "$cmd: something was built: $(ls "$work/build-$cmd")"
done
echo "ok: .ci/quickstart demo and test refuse a disk without room, at once, and say how much"
