#!/usr/bin/env bash
# tests/run_scenario.sh keeps a failed run's reports where MW_KEEP_FAILED_REPORTS says (what
# tests/flake_hunt.sh sets), and only a failed run's: driven by a stand-in mwchaos that writes a
# report and exits as told (STUB_RC).
#
# usage: keep_reports_test.sh REPO WORKDIR
set -u
repo=$1 work=$2
. "$repo/tests/harness/lib.sh"
rm -rf "$work" && mkdir -p "$work"
stub="$work/mwchaos"
cat >"$stub" <<'STUB'
#!/bin/sh
# mwchaos run ... -o OUT|--out OUT ... NAME.lua: writes OUT/NAME/report.json, exits $STUB_RC.
out="" prev=""
for a in "$@"; do
  case "$prev" in -o | --out) out=$a ;; esac
  case "$a" in *.lua) name=$(basename "$a" .lua) ;; esac
  prev=$a
done
mkdir -p "$out/$name" && echo "{\"run\": $$}" >"$out/$name/report.json"
exit "$STUB_RC"
STUB
chmod +x "$stub"
touch "$work/net_x.lua"

# try RC OPTION KEEP: runs run_scenario.sh with the stub exiting RC, reports given with OPTION,
# MW_KEEP_FAILED_REPORTS=KEEP ("" unset); leaves its exit code in $rc and its stderr in $err.
try() {
  local keep=$3
  rm -rf "$work/out" "$work/kept"
  if [ -n "$keep" ]; then
    err=$(STUB_RC=$1 MW_KEEP_FAILED_REPORTS=$keep "$repo/tests/run_scenario.sh" "$stub" "$2" \
      "$work/out" "$work/net_x.lua" 2>&1 >/dev/null)
  else
    err=$(env -u MW_KEEP_FAILED_REPORTS STUB_RC=$1 "$repo/tests/run_scenario.sh" "$stub" "$2" \
      "$work/out" "$work/net_x.lua" 2>&1 >/dev/null)
  fi
  rc=$?
}
kept() { find "$work/kept" -name report.json 2>/dev/null | wc -l; }

for opt in -o --out; do
  try 1 "$opt" "$work/kept"
  [ "$rc" = 1 ] || fail "failed run ($opt): exit $rc, expected 1"
  [ "$(kept)" = 1 ] || fail "failed run ($opt): $(kept) reports kept, expected 1"
  copy=$(find "$work/kept" -name report.json | head -n 1)
  cmp -s "$copy" "$work/out/net_x/report.json" || fail "failed run ($opt): the copy differs"
  case "$copy" in "$work/kept/net_x-"*/report.json) ;; *) fail "kept as $copy, not net_x-PID" ;; esac
  [[ $err == *"reports of this failed run are kept in $work/kept/net_x-"* ]] ||
    fail "failed run ($opt): stderr does not name the copy: $err"
done
for code in 0 3; do  # passed, and skipped ("this machine cannot run it")
  try "$code" -o "$work/kept"
  [ "$rc" = "$code" ] || fail "exit $code passed on as $rc"
  [ "$(kept)" = 0 ] || fail "exit $code: reports kept, expected none"
done
try 4 -o ""  # unset: nothing kept, the exit passed on
[ "$rc" = 4 ] || fail "unset: exit $rc, expected 4"
[ ! -e "$work/kept" ] || fail "unset: something was kept"

[ "$failures" = 0 ] && echo "keep_reports_test: all checks passed"
exit $((failures > 0))
