#!/usr/bin/env bash
# What libfaketime (and a time namespace) do to CLOCK_MONOTONIC and CLOCK_REALTIME.
#
#   faketime_check.sh [SSH_DIR]
#
# Compiles a tiny C program and a tiny C++ one (std::chrono::steady_clock, as
# the agent uses) into a temporary directory and runs them plain, under
# libfaketime with FAKETIME="+2s" (with and without FAKETIME_DONT_FAKE_MONOTONIC),
# and in a time namespace with a +2 s monotonic offset. Prints, for each way,
# how far each clock is from this shell's own reading. With SSH_DIR (an
# 'ssh_hosts.sh up' directory) it also runs the faked program on h1 over ssh.
#
# Exit: 0 when every check holds, 1 when one fails, 77 when a tool is missing.
set -uo pipefail
lib=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
[[ -f $lib ]] || { echo "SKIP: no $lib (apt-get install libfaketime)"; exit 77; }
command -v cc >/dev/null || { echo "SKIP: no C compiler (apt-get install gcc)"; exit 77; }
have_cxx=1; command -v c++ >/dev/null || have_cxx=0
ssh_dir=${1:-}

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/clocks.c" <<'EOF'
/* Prints this process's CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW
   and CLOCK_BOOTTIME minus the values in argv[1..4] (the caller's, taken just
   before), in seconds. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char** argv) {
  clockid_t ids[4] = {CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW, CLOCK_BOOTTIME};
  const char* names[4] = {"REALTIME", "MONOTONIC", "MONOTONIC_RAW", "BOOTTIME"};
  if (argc == 1) { for (int i = 0; i < 4; i++) printf("%.6f ", now(ids[i])); printf("\n"); return 0; }
  for (int i = 0; i < 4; i++) printf("%s=%+.3f ", names[i], now(ids[i]) - atof(argv[i + 1]));
  printf("time()=%+ld\n", (long)time(NULL) - (long)atof(argv[1]));
  return 0;
}
EOF
cat > "$tmp/steady.cc" <<'EOF'
// steady_clock and system_clock, minus argv[1] (MONOTONIC) and argv[2] (REALTIME).
#include <chrono>
#include <cstdio>
#include <cstdlib>
int main(int argc, char** argv) {
  using namespace std::chrono;
  double st = duration<double>(steady_clock::now().time_since_epoch()).count();
  double sy = duration<double>(system_clock::now().time_since_epoch()).count();
  if (argc < 3) { std::printf("%.6f %.6f\n", st, sy); return 0; }
  std::printf("steady_clock=%+.3f system_clock=%+.3f\n", st - std::atof(argv[1]), sy - std::atof(argv[2]));
}
EOF
cc -O1 -o "$tmp/clocks" "$tmp/clocks.c" || exit 1
if ((have_cxx)); then c++ -std=c++20 -O1 -o "$tmp/steady" "$tmp/steady.cc" || exit 1; fi

fail=0
# run LABEL EXPECT_REAL EXPECT_MONO PREFIX... : runs the programs under PREFIX.
# EXPECT_MONO "rt+2" means: MONOTONIC reads what REALTIME reads, plus 2 s.
run() {
  local label=$1 er=$2 em=$3; shift 3
  local ref out
  ref=$("$tmp/clocks")
  if [[ $em == rt* ]]; then
    em=$(awk -v r="$(cut -d' ' -f1 <<<"$ref")" -v m="$(cut -d' ' -f2 <<<"$ref")" -v d="${em#rt}" \
      'BEGIN { printf "%.3f", r - m + d }')
  fi
  # shellcheck disable=SC2086 # four numbers, split on purpose
  out=$("$@" "$tmp/clocks" $ref)
  # The reading lies between our two readings, shifted by the expected offset.
  local el; el=$(awk -v a="$(cut -d' ' -f1 <<<"$ref")" -v b="$(cut -d' ' -f1 <<<"$("$tmp/clocks")")" 'BEGIN { print b - a }')
  printf '%-44s %s\n' "$label" "$out"
  local r m
  r=$(sed -E 's/.*REALTIME=([-+0-9.]+).*/\1/' <<<"$out")
  m=$(sed -E 's/.* MONOTONIC=([-+0-9.]+).*/\1/' <<<"$out")
  if ! awk -v r="$r" -v m="$m" -v er="$er" -v em="$em" -v el="$el" \
      'BEGIN { t = 0.01; exit !(r >= er - t && r <= er + el + t && m >= em - t && m <= em + el + t) }'; then
    echo "  FAIL: expected REALTIME=$er MONOTONIC=$em (+ up to ${el}s the command took)"; fail=1
  fi
  if ((have_cxx)); then
    printf '%-44s %s\n' "" "$("$@" "$tmp/steady" "$(cut -d' ' -f2 <<<"$ref")" "$(cut -d' ' -f1 <<<"$ref")")"
  fi
}

echo "offsets from this shell's clocks (s), libfaketime $(dpkg-query -W -f '${Version}' libfaketime 2>/dev/null)"
run "plain" 0 0 env
# libfaketime 0.9.10 with a relative offset fakes CLOCK_MONOTONIC (and _RAW,
# BOOTTIME) as the faked REALTIME: a jump of (epoch - uptime) + 2 s, not +2 s.
run "FAKETIME=+2s" 2 rt+2 env LD_PRELOAD=$lib FAKETIME=+2s
run "FAKETIME=+2s FAKETIME_DONT_FAKE_MONOTONIC=1" 2 0 env LD_PRELOAD=$lib FAKETIME=+2s FAKETIME_DONT_FAKE_MONOTONIC=1
run "FAKETIME=+2s DONT_FAKE_MONOTONIC=1" 2 0 env LD_PRELOAD=$lib FAKETIME=+2s DONT_FAKE_MONOTONIC=1
run "FAKETIME=-2s" -2 rt-2 env LD_PRELOAD=$lib FAKETIME=-2s
if unshare --time --monotonic 2 true 2>/dev/null; then
  run "unshare --time --monotonic 2 (time ns)" 0 2 unshare --time --monotonic 2 --boottime 2
else
  echo "time namespace: not available here (unshare --time failed)"
fi
if [[ -n $ssh_dir ]]; then
  run "ssh h1, FAKETIME=+2s" 2 rt+2 ssh -F "$ssh_dir/ssh_config" h1 LD_PRELOAD=$lib FAKETIME=+2s
  run "ssh h1, unshare --time --monotonic 2" 0 2 ssh -F "$ssh_dir/ssh_config" h1 unshare --time --monotonic 2
fi

# A sanitizer build refuses LD_PRELOAD of anything ahead of its runtime.
if cc -fsanitize=address -o "$tmp/clocks_asan" "$tmp/clocks.c" 2>/dev/null; then
  if LD_PRELOAD=$lib FAKETIME=+2s "$tmp/clocks_asan" >/dev/null 2>"$tmp/asan.err"; then
    echo "ASan build under libfaketime: runs"
  else
    echo "ASan build under libfaketime: refused: $(head -c 120 "$tmp/asan.err")"
    echo "  (ASAN_OPTIONS=verify_asan_link_order=0 lets it run; a time namespace needs no preload)"
  fi
fi
exit $fail
