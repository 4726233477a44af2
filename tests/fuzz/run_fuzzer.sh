#!/usr/bin/env bash
# run_fuzzer.sh FUZZER NEW SECONDS CORPUS... [-dict=FILE]: runs a libFuzzer target for SECONDS,
# every file of the CORPUS folders first (read only: new inputs go to NEW, which is emptied first),
# with the tokens of a libFuzzer dictionary when -dict= names one (libFuzzer takes its flags
# anywhere among the folders). A crash, a sanitizer report, a leak or an input slower than 10 s
# fails (libFuzzer exits non-zero and writes the input beside NEW).
set -euo pipefail
fuzzer=$1 new=$2 seconds=$3
shift 3
rm -rf "$new"
mkdir -p "$new"
cd "$new/.."
exec "$fuzzer" "$new" "$@" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1
