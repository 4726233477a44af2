#!/usr/bin/env bash
# What Slurm does when a host is cut off, in the Slurm fixture.
#
#   slurm_partition_probe.sh DIR [HOLD_S]
#
# DIR is a 'slurm_hosts.sh up DIR 2' directory. Runs a job with one
# 'srun --overlap' step per node, then in h1's namespace:
#   1. data-plane partition: DROP everything between h1 and h2 (slurm ports
#      included), HOLD_S seconds (default 30): are both steps alive, is a
#      node marked down?
#   2. full cut: DROP everything on h1's eth0 (controller, slurmctld, h2):
#      how long until a step, or the job, ends; what sinfo says.
# Rules are removed at exit. Prints what it sees, with times.
set -uo pipefail
dir=${1:?usage: slurm_partition_probe.sh DIR [HOLD_S]}; hold=${2:-30}
# shellcheck disable=SC1091
source "$dir/slurm.env"
ns=$MWH_H1_NETNS
in_h1() { ip netns exec "$ns" "$@"; }   # iptables only: no slurmd started this way
cleanup() {
  in_h1 iptables -F INPUT 2>/dev/null; in_h1 iptables -F OUTPUT 2>/dev/null
  [[ -n ${job:-} ]] && scancel "$job" 2>/dev/null
  kill -KILL "${a:-}" "${b:-}" 2>/dev/null
  wait 2>/dev/null
}
trap cleanup EXIT
job=$(salloc -N2 --no-shell 2>&1 | sed -n 's/.*Granted job allocation \([0-9][0-9]*\).*/\1/p' | tail -1)
srun --jobid="$job" --overlap -N1 -n1 -u -w h1 sleep 10000 2>"$dir/log/probe.h1.err" & a=$!
srun --jobid="$job" --overlap -N1 -n1 -u -w h2 sleep 10000 2>"$dir/log/probe.h2.err" & b=$!
sleep 2
state() { printf 't=%3ds steps=[%s] nodes=[%s] srun_h1=%s srun_h2=%s\n' "$((SECONDS - t0))" \
  "$(squeue -h -s -j "$job" -o '%i@%N' 2>/dev/null | tr '\n' ' ')" \
  "$(sinfo -h -N -o '%N:%T' 2>/dev/null | tr '\n' ' ')" \
  "$(kill -0 $a 2>/dev/null && echo up || echo gone)" "$(kill -0 $b 2>/dev/null && echo up || echo gone)"; }
t0=$SECONDS; state
echo "== 1. partition h1 <-> h2 (all ports) for ${hold}s"
in_h1 iptables -A INPUT -s "$MWH_H2_ADDR" -j DROP
in_h1 iptables -A OUTPUT -d "$MWH_H2_ADDR" -j DROP
t0=$SECONDS
while ((SECONDS - t0 < hold)); do sleep 5; state; done
in_h1 iptables -F INPUT; in_h1 iptables -F OUTPUT
echo "== 2. h1 cut off entirely"
in_h1 iptables -A INPUT -i eth0 -j DROP
in_h1 iptables -A OUTPUT -o eth0 -j DROP
t0=$SECONDS
while ((SECONDS - t0 < 120)); do
  sleep 2; state
  kill -0 $a 2>/dev/null || kill -0 $b 2>/dev/null || break
done
echo "== srun stderr"; tail -n 5 "$dir/log/probe.h1.err" "$dir/log/probe.h2.err"
echo "== slurmctld log"; grep -E "JobId=$job|h1" "$dir/log/slurmctld.log" | tail -n 12
