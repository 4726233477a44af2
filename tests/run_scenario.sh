#!/bin/sh
# The one way the test suite runs a scenario: the library's scenarios (ctest scenario.*), the
# examples (ctest example.*) and the Python package's scenario tests all come through here.
#
# usage: run_scenario.sh MWCHAOS [mwchaos run options] SCENARIO...
#
# The policy: an inconclusive verdict (exit 4: the machine's noise larger than a throughput
# margin) is run again, twice at most; mwchaos prints each rerun ("RERUN <name>: inconclusive, run
# 2 of at most 3") and counts it in the report ("reruns"). Inconclusive after the reruns fails
# the test, as does any other exit but 0 (3, "this machine cannot run it", is a skip for ctest
# where the test says so). Nothing else is ever rerun: a failure is a failure on its first try.
#
# MW_KEEP_FAILED_REPORTS=DIR (tests/flake_hunt.sh sets it): when the run fails, the report folder
# of each scenario given (OUT/NAME, OUT from -o) is copied to DIR/NAME-PID before a later run of
# the same test overwrites it, and the copy is named on stderr.
set -eu
[ $# -ge 2 ] || { echo "usage: run_scenario.sh MWCHAOS [mwchaos run options] SCENARIO..." >&2; exit 2; }
mwchaos=$1
shift
[ -n "${MW_KEEP_FAILED_REPORTS:-}" ] || exec "$mwchaos" run -q --rerun-inconclusive 2 "$@"
rc=0
"$mwchaos" run -q --rerun-inconclusive 2 "$@" || rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then
  out="" prev=""
  for a in "$@"; do
    case "$prev" in -o | --out) out=$a ;; esac
    prev=$a
  done
  for a in "$@"; do
    case "$a" in *.lua) ;; *) continue ;; esac
    name=$(basename "$a" .lua)
    [ -n "$out" ] && [ -d "$out/$name" ] || continue
    keep="$MW_KEEP_FAILED_REPORTS/$name-$$"
    mkdir -p "$keep" && cp -r "$out/$name/." "$keep/" &&
      echo "run_scenario.sh: the reports of this failed run are kept in $keep" >&2
  done
fi
exit "$rc"
