#!/usr/bin/env bash
# A real Slurm cluster of simulated hosts on this one machine.
#
#   slurm_hosts.sh up DIR N     slurmctld (and munged) in a control namespace
#                               "ctl", one slurmd per host namespace h1..hN
#   slurm_hosts.sh down DIR     kill all of it (jobs included), remove the
#                               namespaces and links (idempotent)
#
# Each daemon runs in a named network namespace entered with nsenter --net
# and a new UTS namespace (unshare --uts, hostname set): never 'ip netns
# exec', which remounts /sys and so hides the cgroup mounts from slurmd.
# The mount namespace stays the root one, so the same filesystem everywhere;
# munged's socket is a path in DIR, shared by all.
#
# Environment (optional):
#   MWH_SLURM_SUBNET  10.X.Y of the /24 to use (default 10.202.1; the ssh
#                     fixture defaults to 10.202.0, so both can run at once)
#   MWH_WAIT_S        how long 'up' waits for the nodes to be idle (default 30)
#   MWH_SLURM_CGROUP  1: proctrack/cgroup + task/cgroup (cgroup.conf in DIR)
#                     instead of proctrack/linuxproc + task/none. One such
#                     fixture at a time (cgroups are named slurm_<node>).
#
# The client commands (salloc, srun, sbatch, squeue, scancel, sinfo) run in
# the root namespace with SLURM_CONF=DIR/slurm.conf (see DIR/slurm.env).
set -Eeuo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib_net.sh
source "$here/lib_net.sh"

usage() { echo "usage: $0 up DIR N | down DIR" >&2; exit 2; }

up_failed() {
  local rc=$?
  ((rc == 0)) && return
  echo "up failed; logs are in $1/log; tearing down" >&2
  cmd_down "$1" >/dev/null 2>&1 || true
  exit "$rc"
}

cmd_up() {
  local dir=$1 n=$2
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || mwh_die "N must be 1..200"
  mwh_need_root
  local b
  for b in slurmctld slurmd munged srun salloc scontrol; do
    command -v "$b" >/dev/null || mwh_die "no $b: apt-get install slurm-wlm munge"
  done
  local s=${MWH_SLURM_SUBNET:-10.202.1} wait_s=${MWH_WAIT_S:-30}
  mwh_check_subnet "$s"
  local p; p=$(mwh_prefix "$s")
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [[ ! -e $dir/slurm.env ]] || mwh_die "$dir/slurm.env exists: run 'down $dir' first"
  mwh_net_check_free "$p" "$s"
  rm -rf "$dir"/state "$dir"/spool "$dir"/log "$dir"/munge "$dir"/slurm.conf
  printf 'MWH_PREFIX=%q\nMWH_SUBNET=%q\n' "$p" "$s" > "$dir/net.state"
  # shellcheck disable=SC2064
  trap "up_failed '$dir'" EXIT
  trap 'echo "${0##*/}: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR

  local members=(ctl:254) i
  for ((i = 1; i <= n; i++)); do members+=("h$i:$((i + 1))"); done
  mwh_net_up "$p" "$s" "${members[@]}"

  mkdir -p "$dir/state" "$dir/log" "$dir/munge"
  chmod 0700 "$dir/munge"
  for ((i = 1; i <= n; i++)); do mkdir -p "$dir/spool/h$i"; done

  # munge: a key per run; munged in the control namespace (its socket is a path).
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$dir/munge/munge.key"
  local sock=$dir/munge/munge.socket
  setsid nsenter --net="/run/netns/$p-ctl" munged -F --force \
    --key-file="$dir/munge/munge.key" --socket="$sock" \
    --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" \
    --log-file="$dir/log/munged.log" < /dev/null > "$dir/log/munged.out" 2>&1 &
  local munged_pid=$!
  local t=$((SECONDS + 10))
  until [[ -S $sock ]]; do
    if ((SECONDS >= t)) || ! kill -0 $munged_pid 2>/dev/null; then
      cat "$dir/log/munged.out" "$dir/log/munged.log" >&2 2>/dev/null
      mwh_die "munged did not start"
    fi
    sleep 0.05
  done

  # MWH_SLURM_CGROUP=1: the cgroup plugins (cgroup.conf beside slurm.conf).
  local proctrack=proctrack/linuxproc taskplugin=task/none
  rm -f "$dir/cgroup.conf"
  if [[ ${MWH_SLURM_CGROUP:-0} == 1 ]]; then
    # slurmd names its cgroups slurm_<node>: two fixtures with cgroups at once
    # would share them.
    for ((i = 1; i <= n; i++)); do
      compgen -G "/sys/fs/cgroup/*/slurm_h$i" >/dev/null &&
        mwh_die "/sys/fs/cgroup/*/slurm_h$i exists: another Slurm fixture with MWH_SLURM_CGROUP=1 runs (or was not torn down)"
    done
    proctrack=proctrack/cgroup taskplugin=task/cgroup
    printf 'CgroupPlugin=autodetect\nConstrainCores=no\nConstrainRAMSpace=no\nConstrainDevices=no\n' > "$dir/cgroup.conf"
  fi
  cat > "$dir/slurm.conf" <<EOF
# written by tests/hosts/slurm_hosts.sh up
ClusterName=mwh
SlurmctldHost=ctl($s.254)
SlurmctldPort=6817
SlurmdPort=6818
SrunPortRange=60001-63000
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/state/slurmctld.pid
SlurmdPidFile=$dir/spool/%n/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=$proctrack
TaskPlugin=$taskplugin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=10
SlurmdTimeout=60
MessageTimeout=10
EOF
  for ((i = 1; i <= n; i++)); do
    echo "NodeName=h$i NodeAddr=$s.$((i + 1)) CPUs=8 State=UNKNOWN" >> "$dir/slurm.conf"
  done
  echo "PartitionName=debug Nodes=h[1-$n] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES" >> "$dir/slurm.conf"

  export SLURM_CONF=$dir/slurm.conf
  setsid nsenter --net="/run/netns/$p-ctl" unshare --uts \
    sh -c "hostname ctl && exec slurmctld -D -i -f '$dir/slurm.conf'" \
    < /dev/null > "$dir/log/slurmctld.out" 2>&1 &
  local ctld_pid=$! slurmd_pids=()
  for ((i = 1; i <= n; i++)); do
    setsid nsenter --net="/run/netns/$p-h$i" unshare --uts \
      sh -c "hostname h$i && exec slurmd -D -N h$i -f '$dir/slurm.conf'" \
      < /dev/null > "$dir/log/slurmd.h$i.out" 2>&1 &
    slurmd_pids+=($!)
  done

  # Wait until every node is idle.
  t=$((SECONDS + wait_s))
  local idle=0
  while ((SECONDS < t)); do
    kill -0 $ctld_pid 2>/dev/null || break
    idle=$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$' || true)
    ((idle == n)) && break
    sleep 0.2
  done
  if ((idle != n)); then
    echo "only $idle of $n nodes idle after ${wait_s}s:" >&2
    sinfo -N -o '%N %T %E' >&2 || true
    tail -n 20 "$dir/log/slurmctld.out" "$dir/log/slurmctld.log" >&2 2>/dev/null || true
    false
  fi
  trap - EXIT ERR

  {
    echo "# written by tests/hosts/slurm_hosts.sh up; source it"
    printf 'export SLURM_CONF=%q\n' "$dir/slurm.conf"
    printf 'MWH_SLURM_DIR=%q\n' "$dir"
    printf 'MWH_SLURM_N=%d\n' "$n"
    printf 'MWH_SUBNET=%q\n' "$s"
    printf 'MWH_PREFIX=%q\n' "$p"
    printf 'MWH_CONTROLLER_ADDR=%q\n' "$s.1"
    printf 'MWH_SLURMCTLD_ADDR=%q\n' "$s.254"
    printf 'MWH_SLURMCTLD_NETNS=%q\n' "$p-ctl"
    printf 'MWH_SLURMCTLD_PID=%d\n' "$ctld_pid"
    printf 'MWH_MUNGED_PID=%d\n' "$munged_pid"
    printf 'MWH_MUNGE_SOCKET=%q\n' "$sock"
    printf 'MWH_SLURM_PORTS=%q\n' "6817 6818 60001-63000"
    local names="" nss="$p-sw $p-ctl" pids="$munged_pid $ctld_pid"
    for ((i = 1; i <= n; i++)); do
      names+="${names:+ }h$i"; nss+=" $p-h$i"; pids+=" ${slurmd_pids[i - 1]}"
      printf 'MWH_H%d_ADDR=%q\n' "$i" "$s.$((i + 1))"
      printf 'MWH_H%d_NETNS=%q\n' "$i" "$p-h$i"
      printf 'MWH_H%d_SLURMD_PID=%d\n' "$i" "${slurmd_pids[i - 1]}"
    done
    printf 'MWH_HOSTS=%q\n' "$names"
    printf 'MWH_NETNS=%q\n' "$nss"
    printf 'MWH_PIDS=%q\n' "$pids"
  } > "$dir/slurm.env"
  cat "$dir/slurm.env"
}

cmd_down() {
  local dir=$1
  dir=$(cd "$dir" 2>/dev/null && pwd || echo "$dir")
  mwh_need_root
  local MWH_PREFIX="" MWH_SUBNET="" MWH_PIDS=""
  if [[ -f $dir/slurm.env ]]; then
    # shellcheck disable=SC1091
    source "$dir/slurm.env"
  elif [[ -f $dir/net.state ]]; then
    # shellcheck disable=SC1091
    source "$dir/net.state"
  else
    MWH_SUBNET=${MWH_SLURM_SUBNET:-10.202.1}
    MWH_PREFIX=$(mwh_prefix "$MWH_SUBNET")
  fi
  # Every daemon, job step and srun-launched task lives in one of the
  # namespaces: killing what is in them ends it all. Slurm clients in the
  # root namespace (srun, salloc, ...) whose environment names this DIR's
  # slurm.conf would otherwise retry for minutes: they are killed too, and
  # nothing else (never this script's callers).
  local pid pr comm
  for pid in $MWH_PIDS; do kill -TERM "$pid" 2>/dev/null || true; done
  for pr in /proc/[0-9]*; do
    pid=${pr#/proc/}
    comm=$(cat "$pr/comm" 2>/dev/null) || continue
    case $comm in srun|salloc|sbatch|sattach|scancel|squeue|sinfo|scontrol|sacct|sstat) ;; *) continue ;; esac
    if { tr '\0' '\n' < "$pr/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$dir/slurm.conf"; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  mwh_net_down "$MWH_PREFIX"
  local left; left=$(mwh_leftovers "$MWH_PREFIX")
  # With MWH_SLURM_CGROUP=1 slurmd made /sys/fs/cgroup/<controller>/slurm_hI;
  # they are empty now that every process in the namespaces is gone.
  if [[ -f $dir/cgroup.conf ]]; then
    local node cg
    for node in "$dir"/spool/*/; do
      node=$(basename "$node")
      for cg in /sys/fs/cgroup/*/"slurm_$node" /sys/fs/cgroup/unified/*/"slurm_$node"; do
        [[ -d $cg ]] || continue
        find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
        [[ -d $cg ]] && left+=$'\n'"cgroup $cg"
      done
    done
    rm -f "$dir/cgroup.conf"
  fi
  rm -f "$dir/slurm.env" "$dir/net.state"
  if [[ -n $left ]]; then
    echo "left behind:" >&2; echo "$left" >&2; return 1
  fi
}

[[ $# -ge 2 ]] || usage
case $1 in
  up) [[ $# -eq 3 ]] || usage; cmd_up "$2" "$3" ;;
  down) [[ $# -eq 2 ]] || usage; cmd_down "$2" ;;
  *) usage ;;
esac
