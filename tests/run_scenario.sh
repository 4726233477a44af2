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
set -eu
[ $# -ge 2 ] || { echo "usage: run_scenario.sh MWCHAOS [mwchaos run options] SCENARIO..." >&2; exit 2; }
mwchaos=$1
shift
exec "$mwchaos" run -q --rerun-inconclusive 2 "$@"
