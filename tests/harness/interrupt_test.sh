#!/usr/bin/env bash
# Stopping the harness mid-run leaves nothing behind: no worker process, no failpoint fifo, no
# temporary directory. SIGINT and SIGTERM stop it cleanly (exit 130, a report saying
# "interrupted"); SIGKILL gives it no chance, and the workers still die (parent-death signal) and
# no file remains (fifos and their directory are removed as soon as both ends are open).
# Usage: interrupt_test.sh <mwchaos> <source dir> <scratch dir>
set -uo pipefail
mwchaos=$1
src=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# This build's workers only (another build's tests may be running on the machine too).
worker_path=$(cd "$(dirname "$mwchaos")" && pwd)/mw_worker
workers() { pgrep -f "^$worker_path " | sort; }
# Every network namespace in use by any process (simulated hosts live as long as a process holds
# them), and the named ones.
netns() { { for p in /proc/[0-9]*; do readlink "$p/ns/net"; done; ip netns list; } 2>/dev/null | sort -u; }
networked=0
if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then networked=1; fi
tmpfiles() { find /tmp -maxdepth 2 \( -name 'mwchaos-*' -o -name 'fiu-*.in' -o -name 'fiu-*.out' \) 2>/dev/null | sort; }

before_workers=$(workers)
before_files=$(tmpfiles)
before_netns=$(netns)

runs="KILL INT TERM"
[ "$networked" = 1 ] && runs="$runs KILL:hosts INT:hosts"
all_tokens=""
for run in $runs; do
  sig=${run%%:*}
  fixture=long_running
  [ "$run" != "$sig" ] && fixture=long_running_hosts
  sig_dir=$work/$sig-$fixture
  "$mwchaos" run -q -o "$sig_dir" "$src/tests/harness/fixtures/$fixture.lua" >"$sig_dir.log" 2>&1 &
  pid=$!
  # Wait until both workers run and the run has started (its first metrics flow after joining).
  for _ in $(seq 1 100); do
    [ "$(comm -13 <(echo "$before_workers") <(workers) | grep -c .)" -ge 2 ] && break
    sleep 0.1
  done
  sleep 1.5
  started=$(comm -13 <(echo "$before_workers") <(workers) | grep -c .)
  [ "$started" -ge 2 ] || fail "SIG$sig: the workers did not start ($started running)"
  # The run's worlds have a random token of their own, in the workers' environment only.
  tokens=""
  for p in $(comm -13 <(echo "$before_workers") <(workers)); do
    t=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^MW_CHAOS_STORE_TOKEN=//p')
    if [[ ! "$t" =~ ^[0-9a-f]{64}$ ]]; then
      fail "SIG$sig: worker $p has no 64-hex-digit store token in its environment"
      continue
    fi
    tr '\0' ' ' <"/proc/$p/cmdline" | grep -q "$t" &&
      fail "SIG$sig: the store token is on worker $p's command line"
    tokens="$tokens $t"
  done
  n=$(tr ' ' '\n' <<<"$tokens" | sort -u | grep -c .)
  [ "$n" = 1 ] || fail "SIG$sig: the workers of one run hold $n different tokens"
  all_tokens="$all_tokens $(tr ' ' '\n' <<<"$tokens" | sort -u)"
  kill -"$sig" "$pid"
  ended "SIG$sig: the harness" "$pid" 10
  case $sig in
    KILL) [ "$rc" = 137 ] || fail "SIGKILL: exit $rc" ;;
    *)
      [ "$rc" = 130 ] || { fail "SIG$sig: exit $rc, expected 130"; cat "$sig_dir.log"; }
      grep -q '"outcome": "interrupted"' "$sig_dir/$fixture/report.json" 2>/dev/null ||
        fail "SIG$sig: no report saying interrupted"
      ;;
  esac
  # Workers die with the harness: give the kernel a moment to deliver the parent-death signal.
  for _ in $(seq 1 50); do
    [ "$(workers)" = "$before_workers" ] && break
    sleep 0.1
  done
  left=$(comm -13 <(echo "$before_workers") <(workers))
  [ -z "$left" ] || fail "SIG$sig: worker processes left behind: $left"
  files=$(comm -13 <(echo "$before_files") <(tmpfiles))
  [ -z "$files" ] || fail "SIG$sig: files left behind: $files"
  # Namespaces (and with them their interfaces and firewall rules) go with their last process.
  for _ in $(seq 1 50); do
    [ "$(netns)" = "$before_netns" ] && break
    sleep 0.1
  done
  left=$(comm -13 <(echo "$before_netns") <(netns))
  [ -z "$left" ] || fail "$run: network namespaces left behind: $left"
done
[ "$networked" = 1 ] || echo "note: not root or no network namespaces: the simulated-host runs were not tried"

# A new token for every run.
runs_seen=$(wc -w <<<"$runs")
distinct=$(tr ' ' '\n' <<<"$all_tokens" | sort -u | grep -c .)
[ "$distinct" = "$runs_seen" ] || fail "$runs_seen runs used $distinct distinct store tokens"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "nothing left behind after SIGKILL, SIGINT and SIGTERM (runs: $runs)"
