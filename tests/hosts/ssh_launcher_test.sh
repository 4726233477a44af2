#!/usr/bin/env bash
# The ssh launcher, for real (issue 24): three simulated remote hosts, each a network + UTS
# namespace with its own sshd (ssh_hosts.sh, keys made per run, port 2222), bound to the
# scenarios' logical hosts h0..h2 by an inventory with launcher = "ssh". mwchaos reaches each
# host only through `ssh ... mwchaos agent --stdio`.
#
# 1. The network scenarios of the library and a kill, a pause and a restart on remote hosts
#    (tests/hosts/scenarios) pass, every host's agent reached over ssh.
#    With h0's and h2's agents in time namespaces 2 s and 5 s ahead (the inventory's wrap), the
#    kill scenario keeps its verdicts and the report gives each host's offset.
# 2. SIGKILL to mwchaos mid-run, with rules, a qdisc and a fifo folder in place on the hosts:
#    within 5 s (the agents' input closes at once, then their cleanup) no process but sshd, no
#    firewall chain, no qdisc and no folder is left on any host.
# 3. SIGKILL to the agents themselves with a partition, a loss and a bandwidth cap in force: what
#    they left goes with `mwchaos hosts clean` (and `hosts check`), never a live agent's rules.
# 4. A role that never dies after SIGKILL (the agent's test hook): the rules go first, at once.
# 5. The whole ephemeral range exempt: a partition still cuts the data plane.
# 6. A host whose interface is ens5: bandwidth shapes it, found by route.
#
# usage: ssh_launcher_test.sh MWCHAOS SOURCE_DIR SCRATCH_DIR
# Exit 77 (skipped, saying why) when not root or sshd is not installed.
set -uo pipefail
mwchaos=$1 src=$2 work=$3
here=$src/tests/hosts
# shellcheck source=tests/hosts/lib_launcher.sh
source "$here/lib_launcher.sh"
need_ssh

# A subnet of our own, so that the test runs beside a developer's fixture.
export MWH_SUBNET=10.202.$((120 + $$ % 100))
hosts_up ssh_hosts.sh 3 hosts.env

ssh_inventory "$work/ssh.lua" "$mwchaos"

# 0. mwchaos hosts check: every host reachable, as root with the tools, its clock and one fault's
#    time; a host with no sshd is named unreachable (exit 1).
rc=0
"$mwchaos" hosts check --hosts "$work/ssh.lua" >"$work/check.log" 2>&1 || rc=$?
cat "$work/check.log"
[[ $rc == 0 ]] || fail "hosts check: exit $rc, expected 0"
for h in h0 h1 h2; do
  grep -q "^$h (ssh):" "$work/check.log" || fail "hosts check does not name $h"
done
[[ $(grep -c "^  reachable: node h[123], agent pid [0-9]*, protocol 1, build " "$work/check.log") == 3 ]] ||
  fail "hosts check: not every host reachable with its node, pid, protocol and build"
[[ $(grep -c "^  root: yes; iptables /" "$work/check.log") == 3 ]] || fail "hosts check: root and tools"
[[ $(grep -c "^  one fault: median " "$work/check.log") == 3 ]] || fail "hosts check: one fault's time"
sed "s/h2 = \"$MWH_H3_ADDR\"/h2 = \"$MWH_SUBNET.99\"/" "$work/ssh.lua" >"$work/ssh_missing.lua"
rc=0
"$mwchaos" hosts check --hosts "$work/ssh_missing.lua" >"$work/check_missing.log" 2>&1 || rc=$?
[[ $rc == 1 ]] || fail "hosts check with a host that has no sshd: exit $rc, expected 1"
grep -q "^  unreachable: .*host 'h2' (launcher ssh)" "$work/check_missing.log" ||
  fail "hosts check does not say h2 is unreachable: $(cat "$work/check_missing.log")"

# 1. Scenarios over ssh.
#    Through tests/run_scenario.sh, as every scenario of the suite: an inconclusive throughput
#    verdict (the machine's noise larger than the margin) is run again twice at most, counted.
#    scancel_step's scenario needs the slurm launcher (hosts.slurm runs it; ssh refuses it).
scenarios=("$src"/scenarios/net_*.lua)
for f in "$here"/scenarios/*.lua; do grep -q 'scancel_step(' "$f" || scenarios+=("$f"); done
rc=0
"$src/tests/run_scenario.sh" "$mwchaos" --hosts "$work/ssh.lua" -o "$work/out" "${scenarios[@]}" >"$work/run.log" 2>&1 ||
  rc=$?
cat "$work/run.log"
[[ $rc == 0 ]] || fail "the scenarios over ssh: exit $rc, expected 0"
for report in "$work"/out/*/report.json; do
  launchers=$(python3 -c 'import json,sys; print(" ".join(sorted({h["launcher"] for h in json.load(open(sys.argv[1]))["run"]["hosts"]})))' "$report")
  [[ $launchers == ssh ]] || fail "$report: hosts reached by '$launchers', expected ssh only"
done

# 1b. Skewed clocks: the agents of h0 (the leader's host, whose member reports the detection)
#     and h2 (the killed worker's) run in time namespaces whose monotonic clocks are 2 s and 5 s
#     ahead. The kill scenario keeps its verdicts (detected within 100 ms: a detection placed
#     unmapped would be 2 s late), and the report gives each offset within its uncertainty.
python3 - "$work/ssh.lua" "$work/skew.lua" "$MWH_H1_ADDR" "$MWH_H3_ADDR" <<'PY'
import sys
src, dst, h0, h2 = sys.argv[1:]
text = open(src).read()
for addr, secs in ((h0, 2), (h2, 5)):
    text = text.replace('"%s"' % addr, '{ target = "%s", wrap = { "unshare", "--time", "--monotonic", "%d" } }' % (addr, secs), 1)
open(dst, "w").write(text)
PY
grep -q 'monotonic", "5"' "$work/skew.lua" || fail "the skewed inventory was not written: $(cat "$work/skew.lua")"
rc=0
"$src/tests/run_scenario.sh" "$mwchaos" --hosts "$work/skew.lua" -o "$work/skew" "$here/scenarios/hosts_kill.lua" \
  >"$work/skew.log" 2>&1 || rc=$?
cat "$work/skew.log"
[[ $rc == 0 ]] || fail "the kill scenario with clocks 2 s and 5 s ahead: exit $rc, expected 0"
skew=$(python3 - "$work"/skew/*/report.json <<'PY'
import json, sys
hosts = {h["name"]: h for h in json.load(open(sys.argv[1]))["run"]["hosts"]}
for name, want in (("h0", 2000.0), ("h1", 0.0), ("h2", 5000.0)):
    h = hosts[name]
    if abs(h["offset_ms"] - want) > h["uncertainty_ms"] + 1.0 or h["same_clock"] != (want == 0):
        print("%s: offset %.3f ms +- %.3f, same_clock %s; expected %.0f ms" %
              (name, h["offset_ms"], h["uncertainty_ms"], h["same_clock"], want))
PY
)
[[ -z $skew ]] || fail "clock offsets in the report: $skew"

# 2. SIGKILL mid-run.
"$mwchaos" run -q --hosts "$work/ssh.lua" -o "$work/killed" "$here/fixtures/controller_killed.lua" \
  >"$work/killed.log" 2>&1 &
run_pid=$!
# Until the faults are in: the chains on h3 (b's host) and the qdisc on h2 (a's host).
in_place=0
for _ in $(seq 1 150); do
  if ip netns exec "$MWH_H3_NETNS" iptables -S 2>/dev/null | grep -q MWCHAOS &&
    ip netns exec "$MWH_H2_NETNS" tc qdisc show 2>/dev/null | grep -q tbf; then
    in_place=1
    break
  fi
  sleep 0.1
done
[[ $in_place == 1 ]] || {
  cat "$work/killed.log"
  fail "the faults were never in place on the hosts"
}
sleep 0.5
[[ -n $(left_on_hosts "$work/ssh.lua") ]] || fail "nothing on the hosts before the kill: the check below proves nothing"
kill -9 "$run_pid"
wait "$run_pid" 2>/dev/null
run_pid=""
# The agents' input closes at once (ssh dies with mwchaos), and their cleanup kills and reaps the
# roles: within 5 s nothing is left.
left=$(left_within_5s "$work/ssh.lua")
[[ -z $left ]] || fail "SIGKILL of mwchaos: left on the hosts after 5 s: $left"

# agents_pids: the host agents running on the fixture's hosts, one pid a line.
agents_pids() {
  local i ns pid
  for i in 1 2 3; do
    ns=$(eval echo "\$MWH_H${i}_NETNS")
    for pid in $(ip netns pids "$ns"); do
      [[ $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) == *"mwchaos agent"* ]] && echo "$pid"
    done
  done
}

# faults_in_place: the agent_killed fixture's faults are in force (chains on h3, a tbf on h2).
faults_in_place() {
  for _ in $(seq 1 150); do
    if ip netns exec "$MWH_H3_NETNS" iptables -S 2>/dev/null | grep -q MWCHAOS &&
      ip netns exec "$MWH_H2_NETNS" tc qdisc show 2>/dev/null | grep -q tbf; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# 3. Agents that die (SIGKILL: the OOM killer, a crash) with a partition, a loss and a bandwidth
#    cap in force leave them behind; the next agent started on the host removes them, never a
#    live agent's. Twice: through `mwchaos hosts clean`, then `mwchaos hosts check`.
for how in clean check; do
  "$mwchaos" run -q --hosts "$work/ssh.lua" -o "$work/agents_killed_$how" \
    "$here/fixtures/agent_killed.lua" >"$work/agents_killed_$how.log" 2>&1 &
  run_pid=$!
  faults_in_place || fail "agents killed ($how): the faults were never in place"
  if [[ $how == clean ]]; then
    # While the agents live, a clean removes nothing of theirs.
    before=$(left_on_hosts "$work/ssh.lua" | grep -c MWCHAOS)
    "$mwchaos" hosts clean --hosts "$work/ssh.lua" >"$work/clean_live.log" 2>&1 ||
      fail "hosts clean beside live agents: exit $?: $(cat "$work/clean_live.log")"
    [[ $(grep -c "clean (nothing left by dead agents)" "$work/clean_live.log") == 3 ]] ||
      fail "hosts clean beside live agents said: $(cat "$work/clean_live.log")"
    after=$(left_on_hosts "$work/ssh.lua" | grep -c MWCHAOS)
    [[ $after == "$before" ]] || fail "hosts clean removed a live agent's rules ($before, then $after)"
  fi
  pids=$(agents_pids)
  [[ -n $pids ]] || fail "agents killed ($how): no agent found on the hosts"
  # shellcheck disable=SC2086
  kill -9 $pids
  killed_at=$(date +%s.%N)
  wait "$run_pid" 2>/dev/null
  run_pid=""
  sleep 0.5  # the roles die with their agent (their parent-death signal)
  left=$(left_on_hosts "$work/ssh.lua")
  grep -q MWCHAOS <<<"$left" && grep -q tbf <<<"$left" ||
    fail "agents killed ($how): no chain or qdisc left behind to clean: the check below proves nothing ($left)"
  rc=0
  "$mwchaos" hosts "$how" --hosts "$work/ssh.lua" >"$work/after_kill_$how.log" 2>&1 || rc=$?
  clean_at=$(date +%s.%N)
  cat "$work/after_kill_$how.log"
  [[ $rc == 0 ]] || fail "hosts $how after the agents were killed: exit $rc"
  grep -q "removed [1-9][0-9]* chain(s) and [0-9]* qdisc(s) left by dead agents" "$work/after_kill_$how.log" ||
    fail "hosts $how does not say what it removed"
  left=$(left_on_hosts "$work/ssh.lua")
  [[ -z $left ]] || fail "hosts $how after the agents were killed: still left: $left"
  echo "agents SIGKILLed with faults in force: hosts $how left the hosts clean $(python3 -c "print(f'{$clean_at - $killed_at:.2f}')") s after the kill"
done

# 4. A role that never dies (a process stuck in the kernel, as the agent's test hook has it):
#    the agent's cleanup takes the network rules down first, at once, and exits after its
#    reaping deadline anyway.
python3 - "$work/ssh.lua" "$work/stall.lua" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
text = re.sub(r'(h\d) = "([0-9.]+)"', r'\1 = { target = "\2", wrap = { "env", "MW_AGENT_TEST_STALL_REAP=1" } }', text)
open(sys.argv[2], "w").write(text)
PY
grep -q MW_AGENT_TEST_STALL_REAP "$work/stall.lua" || fail "the stalling inventory was not written"
"$mwchaos" run -q --hosts "$work/stall.lua" -o "$work/stall" "$here/fixtures/agent_killed.lua" \
  >"$work/stall.log" 2>&1 &
run_pid=$!
faults_in_place || fail "stalled reaping: the faults were never in place"
kill -TERM "$run_pid"
signalled=$(date +%s.%N)
rules_gone=""
for _ in $(seq 1 100); do
  if ! left_on_hosts "$work/ssh.lua" | grep -qE "MWCHAOS|tbf"; then
    rules_gone=$(date +%s.%N)
    break
  fi
  sleep 0.02
done
[[ -n $rules_gone ]] || fail "stalled reaping: the network rules were still in force 2 s after the stop"
wait "$run_pid" 2>/dev/null
run_pid=""
for _ in $(seq 1 80); do
  [[ -z $(agents_pids) ]] && break
  sleep 0.1
done
[[ -z $(agents_pids) ]] || fail "stalled reaping: an agent still runs 8 s after the stop"
echo "a role that never dies: the rules went $(python3 -c "print(f'{$rules_gone - $signalled:.2f}')") s after the stop, the agents exited after their reaping deadline"

# 5. Exempt port ranges are the controller's only: with the whole ephemeral range (32768-60999)
#    exempt, as a srun_port_range overlapping it would be, a partition still cuts the worlds
#    between the hosts (their connections take ephemeral ports inside the range).
sed 's/^return {/return {\n  exempt_ports = { "32768-60999" },/' "$work/ssh.lua" >"$work/exempt.lua"
grep -q 'exempt_ports = { "32768-60999" }' "$work/exempt.lua" || fail "the exempt inventory was not written: $(head -5 "$work/ssh.lua")"
rc=0
"$src/tests/run_scenario.sh" "$mwchaos" --hosts "$work/exempt.lua" -o "$work/exempt" \
  "$src/scenarios/net_silent_partition.lua" >"$work/exempt.log" 2>&1 || rc=$?
cat "$work/exempt.log"
[[ $rc == 0 ]] || fail "a partition with the ephemeral range exempt: exit $rc, expected 0 (the data plane escaped the cut)"

# 6. The shaped interface is the one the route to the peers takes: h2's (the scenario's h1's)
#    renamed ens5, a bandwidth cap there (net_bandwidth_and_delay caps h2: the inventory's h2,
#    MWH_H3) shapes ens5.
ns=$MWH_H3_NETNS
ip -n "$ns" link set eth0 down && ip -n "$ns" link set eth0 name ens5 && ip -n "$ns" link set ens5 up ||
  fail "could not rename h3's eth0"
rc=0
"$src/tests/run_scenario.sh" "$mwchaos" --hosts "$work/ssh.lua" -o "$work/ens5" \
  "$src/scenarios/net_bandwidth_and_delay.lua" >"$work/ens5.log" 2>&1 || rc=$?
cat "$work/ens5.log"
ip -n "$ns" link set ens5 down && ip -n "$ns" link set ens5 name eth0 && ip -n "$ns" link set eth0 up
[[ $rc == 0 ]] || fail "bandwidth on a host whose interface is ens5: exit $rc, expected 0"
python3 - "$work"/ens5/*/report.json <<'PY' || fail "the bandwidth fault on the ens5 host did not succeed"
import json, sys
faults = json.load(open(sys.argv[1]))["run"]["faults"]
bw = [f for f in faults if f["kind"] == "bandwidth"]
sys.exit(0 if bw and all(f.get("outcome") == "ok" for f in bw) else 1)
PY

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "the network scenarios, a kill, a pause and a restart pass over ssh; after SIGKILL of mwchaos nothing is left on any host; agents killed with faults in force are cleaned up by the next one; a stuck role keeps no rule in force; exempt ranges do not shelter the data plane; the shaped interface is found by route"
