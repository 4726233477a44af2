# shellcheck shell=bash
# Shared by the launcher tests (ssh_launcher_test.sh, slurm_launcher_test.sh); sourced, not run.
# Needs `here` (this folder) and `work` (the scratch folder); brings tests/harness/lib.sh (fail).

# shellcheck source=tests/harness/lib.sh
source "${here:?}/../harness/lib.sh"

# skip WHY: exit 77 (ctest: skipped), saying why.
skip() {
  echo "SKIPPED: $*"
  exit 77
}

# need_ssh: skips unless root, with sshd and an ssh client (the ssh fixture's needs).
need_ssh() {
  [[ $(id -u) == 0 ]] || skip "needs root (network namespaces, sshd)"
  [[ -x /usr/sbin/sshd ]] || skip "no sshd (apt-get install openssh-server)"
  command -v ssh >/dev/null || skip "no ssh client (apt-get install openssh-client)"
}

# hosts_up FIXTURE N ENV: a fresh $work, then `FIXTURE up $work/fx N` (a script of this folder),
# torn down when the test exits (run_pid, when set, SIGKILLed first); sources $work/fx/ENV. Fails
# the test, printing the fixture's log, when the hosts do not come up. Sets fx.
hosts_up() {
  local fixture=$1 n=$2 env=$3
  rm -rf "${work:?}"
  mkdir -p "$work"
  fx=$work/fx
  fixture_script=${here:?}/$fixture
  trap hosts_cleanup EXIT
  trap 'exit 130' INT TERM
  "$fixture_script" up "$fx" "$n" >"$work/up.log" 2>&1 || {
    cat "$work/up.log"
    fail "the hosts of $fixture did not come up"
    exit 1
  }
  # shellcheck source=/dev/null
  source "$fx/$env"
}

hosts_cleanup() {
  trap - EXIT INT TERM
  [[ -n ${run_pid:-} ]] && kill -9 "$run_pid" 2>/dev/null
  "$fixture_script" down "$fx" >/dev/null 2>&1
}

# ssh_inventory FILE MWCHAOS: an inventory with launcher = "ssh" binding h0..h2 to the ssh
# fixture's h1..h3 (ssh_hosts.sh's hosts.env, sourced by hosts_up), MWCHAOS as the agent.
ssh_inventory() {
  cat >"$1" <<EOF
return {
  launcher = "ssh",
  hosts = { h0 = "$MWH_H1_ADDR", h1 = "$MWH_H2_ADDR", h2 = "$MWH_H3_ADDR" },
  ssh = {
    user = "root",
    port = $MWH_SSH_PORT,
    identity = "$MWH_SSH_KEY",
    options = { UserKnownHostsFile = "$MWH_KNOWN_HOSTS", StrictHostKeyChecking = "yes",
                IdentitiesOnly = "yes", ConnectTimeout = "5" },
  },
  agent = "$2",
}
EOF
}

# left_on_hosts NEWER: what a run may have left on the ssh fixture's three hosts, one line each:
# a process but sshd, a firewall chain of an agent, a tbf or netem qdisc, and an agent's folder
# in /tmp newer than the file NEWER. Empty when nothing is left.
left_on_hosts() {
  local i ns pid comm
  for i in 1 2 3; do
    ns=$(eval echo "\$MWH_H${i}_NETNS")
    for pid in $(ip netns pids "$ns"); do
      comm=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
      [[ $comm == sshd ]] || echo "h$i: process $pid ($comm)"
    done
    ip netns exec "$ns" iptables -S | grep MWCHAOS | sed "s/^/h$i: /"
    ip netns exec "$ns" tc qdisc show | grep -E 'tbf|netem' | sed "s/^/h$i: /"
  done
  find /tmp -maxdepth 1 -name 'mwchaos-*' -newer "$1" | sed 's/^/folder: /'
}

# left_within_5s NEWER: left_on_hosts NEWER, read again every 0.1 s until it is empty or 5 s have
# passed (the agents' cleanup takes that long at most); what is still left, or nothing.
left_within_5s() {
  local left=""
  for _ in $(seq 1 50); do
    left=$(left_on_hosts "$1")
    [[ -z $left ]] && break
    sleep 0.1
  done
  printf '%s' "$left"
}
