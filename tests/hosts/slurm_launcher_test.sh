#!/usr/bin/env bash
# The Slurm launcher, for real (issue 24): slurmctld in a control namespace and one slurmd per
# simulated host (slurm_hosts.sh: munge key, slurm.conf and state made per run). mwchaos runs
# inside an allocation (salloc -N3) and reaches each host only through its step, `srun --overlap
# -N1 -n1 -u -w NODE mwchaos agent --stdio`, bound to the scenarios' logical hosts h0..h2 by an
# inventory with launcher = "slurm".
#
# 1. A kill (hosts_kill.lua) and a partition that heals (net_partition_heals.lua) pass, every
#    host's agent reached through srun. The partition cuts the data plane only: the steps' srun
#    traffic (SrunPortRange, exempt) goes on, so the agents' pipes stay up through it.
#    scancel_step (hosts_scancel.lua) ends the steps of b's and c's hosts through slurmctld
#    (Slurm's cancel; --signal=KILL): each ends its role alone, the others run to the end.
#    scancel_step(b, "USR1") during a partition (hosts_scancel_usr1.lua): b's agent catches it
#    and cleans its host up; no agent's chain or qdisc is left on any host afterwards.
# 2. No node is marked down or not responding afterwards, and the job ends COMPLETED.
#
# usage: slurm_launcher_test.sh MWCHAOS SOURCE_DIR SCRATCH_DIR
# Exit 77 (skipped, saying why) when not root or Slurm and munge are not installed.
set -uo pipefail
mwchaos=$1 src=$2 work=$3
here=$src/tests/hosts
# shellcheck source=tests/hosts/lib_launcher.sh
source "$here/lib_launcher.sh"
[[ $(id -u) == 0 ]] || skip "needs root (network namespaces, slurmd)"
for prog in slurmctld slurmd munged salloc srun sinfo; do
  command -v "$prog" >/dev/null || [[ -x /usr/sbin/$prog ]] ||
    skip "no $prog (apt-get install slurm-wlm munge)"
done

# A subnet of our own, so that the test runs beside a developer's fixture and the ssh test.
export MWH_SLURM_SUBNET=10.202.$((20 + $$ % 80))
hosts_up slurm_hosts.sh 3 slurm.env

cat >"$work/slurm.lua" <<EOF
return {
  launcher = "slurm",
  hosts = {
    h0 = { target = "h1", address = "$MWH_H1_ADDR" },
    h1 = { target = "h2", address = "$MWH_H2_ADDR" },
    h2 = { target = "h3", address = "$MWH_H3_ADDR" },
  },
  slurm = { srun_port_range = "60001-63000" },
  agent = "$mwchaos",
}
EOF

# 1. The scenarios inside an allocation of the three nodes.
#    Through tests/run_scenario.sh, as every scenario of the suite: an inconclusive throughput
#    verdict (the machine's noise larger than the margin) is run again twice at most, counted.
scenarios=("$here/scenarios/hosts_kill.lua" "$src/scenarios/net_partition_heals.lua"
  "$here/scenarios/hosts_scancel.lua" "$here/scenarios/hosts_scancel_usr1.lua")
rc=0
timeout -s KILL 300 salloc -N3 -w h1,h2,h3 -J mwchaos-test \
  "$src/tests/run_scenario.sh" "$mwchaos" --hosts "$work/slurm.lua" -o "$work/out" "${scenarios[@]}" \
  >"$work/run.log" 2>&1 &
run_pid=$!
wait "$run_pid" || rc=$?
run_pid=""
cat "$work/run.log"
[[ $rc == 0 ]] || fail "the scenarios through srun: exit $rc, expected 0"
reports=("$work"/out/*/report.json)
[[ ${#reports[@]} == 4 && -f ${reports[0]} ]] || fail "expected 4 reports, found: ${reports[*]}"
for report in "${reports[@]}"; do
  [[ -f $report ]] || continue
  launchers=$(python3 -c 'import json,sys; print(" ".join(sorted({h["launcher"] for h in json.load(open(sys.argv[1]))["run"]["hosts"]})))' "$report")
  [[ $launchers == slurm ]] || fail "$report: hosts reached by '$launchers', expected slurm only"
done

# scancel_step ended exactly its role each time: b (Slurm's cancel) and c (--signal=KILL), each
# through scancel of its host's step; leader and a ran to the end.
scancel=$work/out/hosts_scancel/report.json
if [[ -f $scancel ]]; then
  ended=$(python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))["run"]
for f in r["faults"]:
    print(f["action"].replace(" ", "_"), f["outcome"], f["ends_role"], f["note"].split(" ")[0])
for w in sorted(r["workers"], key=lambda w: w["role"]):
    print(w["role"], w["exit"].replace(" ", "_"), w["killed_by_scenario"])' "$scancel" 2>&1)
  echo "scancel_step: $(tr '\n' ';' <<<"$ended")"
  # b and c end either way: reported by their agent as it went (killed by SIGKILL), or with it.
  ended_re='lost_with_its_agent|killed_by_SIG(KILL|TERM)'
  want="^scancel_step_b ok True scancel
scancel_step_c_SIGKILL ok True scancel
a exited_0 False
b ($ended_re) True
c ($ended_re) True
leader exited_0 False$"
  [[ $ended =~ $want ]] || fail "scancel_step should end b and c alone, each by scancel of its step: $ended"
fi

# 1b. SIGUSR1 to b's step during a partition (hosts_scancel_usr1.lua): its agent caught it and
#     cleaned up; no chain or qdisc of an agent is left on any host.
for i in 1 2 3; do
  ns=$(eval echo "\$MWH_H${i}_NETNS")
  left=$(ip netns exec "$ns" iptables -S 2>/dev/null | grep MWCHAOS)
  [[ -z $left ]] || fail "h$i after the scenarios: rules of an agent left: $left"
  left=$(ip netns exec "$ns" tc qdisc show 2>/dev/null | grep -E 'tbf|netem')
  [[ -z $left ]] || fail "h$i after the scenarios: a qdisc left: $left"
done

# 2. The partition marked no node down, and the job ended as it should.
states=$(sinfo -h -N -o '%N %T' 2>&1)
echo "sinfo after the run: $(tr '\n' ';' <<<"$states")"
[[ $(grep -c -E '^h[123] (idle|mixed|allocated|completing)$' <<<"$states") == 3 ]] ||
  fail "a node is not up after the partition: $states"
job=$(scontrol show job 2>/dev/null | grep -m1 -o 'JobState=[A-Z_]*')
[[ -z $job || $job == JobState=COMPLETED ]] || fail "the allocation ended $job, expected COMPLETED"

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "a kill, a healed partition and a cancelled step pass through srun; no node was marked down"
