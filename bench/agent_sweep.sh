#!/usr/bin/env bash
# The time from a host agent's death to a clean host (issue 35; docs/benchmarks.md, "Host
# agents"): in two network namespaces of its own joined by a veth pair (nothing else on this
# machine changes), mw_host_agent_bench --sweep starts an agent in the first, has it partition the
# second's address, drop 10% and cap the bandwidth, SIGKILLs it, and times the next agent's start
# there (it removes what the dead one left before it answers), against an agent's start on a clean
# host. The namespaces go when it ends, however it ends.
#
# usage: bench/agent_sweep.sh [--rounds R] [--build DIR]
# Needs root, ip, iptables and tc; exit 77 without. Exit 0 when every round left the host clean.
set -uo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$src/build/release rounds=20
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "agent_sweep.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "agent_sweep.sh: --rounds wants a positive number, got '$rounds'" >&2; exit 2; }
bench=$build/bench/mw_host_agent_bench mwchaos=$build/bin/mwchaos
for f in "$bench" "$mwchaos"; do
  [[ -x $f ]] || { echo "agent_sweep.sh: $f is missing: build first" >&2; exit 2; }
done
if [[ $(id -u) != 0 ]] || ! command -v iptables >/dev/null || ! command -v tc >/dev/null; then
  echo "agent_sweep.sh: skipped: needs root, iptables and tc"
  exit 77
fi
a=mwsweep-a-$$ b=mwsweep-b-$$
trap 'ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null' EXIT
ip netns add "$a" && ip netns add "$b" &&
  ip -n "$a" link add ens5 type veth peer name ens5 netns "$b" &&
  ip -n "$a" addr add 10.203.0.1/24 dev ens5 && ip -n "$b" addr add 10.203.0.2/24 dev ens5 &&
  ip -n "$a" link set ens5 up && ip -n "$b" link set ens5 up &&
  ip -n "$a" link set lo up || { echo "agent_sweep.sh: could not make the namespaces" >&2; exit 1; }
"$bench" --agent "$mwchaos" --via "ip netns exec $a" --sweep "$rounds" --peer 10.203.0.2
