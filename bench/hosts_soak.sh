#!/usr/bin/env bash
# The nemesis soak over ssh hosts (issue 24; docs/benchmarks.md, "Host agents"): three simulated
# remote hosts with their own sshd (tests/hosts/ssh_hosts.sh), scenarios/soak_nemesis.lua run
# through `mwchaos run --hosts` for its 60 s (or --duration D): partitions, loss, pauses and
# kill+restart drawn from the seed, each delivered by a host's agent over its held ssh pipe.
# Then: the verdict "no world breaks without a fault that touches it" (zero false breaks) and the
# others pass, and nothing is left on any host (process, firewall chain, qdisc, agent folder).
#
# usage: bench/hosts_soak.sh [--duration D] [--seed N] [--build DIR] [--out DIR]
# Needs root, sshd and ssh (apt-get install openssh-server openssh-client); exit 77 without.
# Exit 0 when both hold, 1 when not, 2 on bad usage.
set -uo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
here=$src/tests/hosts
build=$src/build/release duration="" seed="" work=""
while (($#)); do
  case $1 in
    --duration) duration=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) work=$2; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "hosts_soak.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
work=${work:-$(mktemp -d /tmp/mw-hosts-soak.XXXXXX)}
mwchaos=$build/bin/mwchaos
[[ -x $mwchaos ]] || { echo "hosts_soak.sh: $mwchaos is missing: build first" >&2; exit 2; }
# shellcheck source=tests/hosts/lib_launcher.sh
source "$here/lib_launcher.sh"
need_ssh

export MWH_SUBNET=10.202.$((220 + $$ % 30))
hosts_up ssh_hosts.sh 3 hosts.env
ssh_inventory "$work/ssh.lua" "$mwchaos"
args=(run -q --hosts "$work/ssh.lua" -o "$work/out")
[[ -n $duration ]] && args+=(--duration "$duration")
[[ -n $seed ]] && args+=(--seed "$seed")
t0=$SECONDS
rc=0
"$mwchaos" "${args[@]}" "$src/scenarios/soak_nemesis.lua" >"$work/run.log" 2>&1 || rc=$?
took=$((SECONDS - t0))
cat "$work/run.log"
[[ $rc == 0 ]] || fail "the soak over ssh: exit $rc, expected 0"
report=$work/out/soak_nemesis/report.json
if [[ -f $report ]]; then
  python3 - "$report" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("faults delivered: %d; hosts: %s" % (len(d["run"]["faults"]), ", ".join(
    "%s (%s)" % (h["name"], h["launcher"]) for h in d["run"]["hosts"])))
for e in d["expectations"]:
    print("  %-8s %s" % (e["status"], e["name"]))
PY
else
  fail "no report at $report"
fi
left=$(left_within_5s "$work/ssh.lua")
[[ -z $left ]] || fail "left on the hosts after the soak: $left"
echo "soak over ssh: ${took} s, exit $rc; left on the hosts: ${left:-nothing}; report $report"
((failures == 0))
