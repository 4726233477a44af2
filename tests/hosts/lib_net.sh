# shellcheck shell=bash
# Shared by ssh_hosts.sh and slurm_hosts.sh: a simulated LAN of network
# namespaces on this machine, kept apart from chaos/netsim.cc's SimNet
# (10.201.0.0/24, namespaces held by child processes, never named).
#
# Layout for prefix P (e.g. mwh0) and subnet S (e.g. 10.202.0):
#   netns P-sw      the switch: bridge br0, one veth per member
#   netns P-<name>  one per member (h1, h2, ..., or a control node), eth0 = S.<x>/24
#   link  P-ctl     the only thing added to the root namespace: a veth whose
#                   peer is a port of br0; address S.1/24. No default route,
#                   no forwarding, no iptables rule is touched in the root
#                   namespace; the only route added is the connected S.0/24.
#
# Deleting P-sw destroys P-ctl with it (a veth pair dies with either end).

mwh_die() { echo "${0##*/}: $*" >&2; exit 1; }

mwh_need_root() {
  [[ $(id -u) -eq 0 ]] || mwh_die "must run as root (network namespaces)"
}

# mwh_prefix SUBNET -> a short name prefix unique per subnet (IFNAMSIZ is 16).
mwh_prefix() {
  local s=$1
  local b c
  IFS=. read -r _ b c <<<"$s"
  echo "mwh${b}x${c}"
}

mwh_check_subnet() {
  [[ $1 =~ ^10\.([0-9]{1,3})\.([0-9]{1,3})$ ]] || mwh_die "subnet must look like 10.X.Y (got '$1')"
  [[ $1 != 10.201.* ]] || mwh_die "10.201.0.0/16 belongs to the harness's SimNet; pick another subnet"
}

# mwh_net_check_free P S: refuse if namespaces P-* or subnet S.0/24 exist.
mwh_net_check_free() {
  local p=$1 s=$2
  if ip netns list | grep -q "^${p}-"; then
    mwh_die "namespaces ${p}-* already exist (an earlier run not torn down? run 'down' on its DIR)"
  fi
  if ip -o -4 addr show | grep -q " ${s//./\\.}\.[0-9]*/"; then
    mwh_die "subnet ${s}.0/24 is already in use in the root namespace"
  fi
}

# mwh_net_up P S MEMBER:HOSTBYTE...   (call mwh_net_check_free first)
mwh_net_up() {
  local p=$1 s=$2; shift 2
  ip netns add "${p}-sw"
  ip -n "${p}-sw" link set lo up
  ip -n "${p}-sw" link add br0 type bridge
  ip -n "${p}-sw" link set br0 up
  # Controller port: root end ${p}-ctl, switch end "ctl".
  ip link add "${p}-ctl" type veth peer name ctl netns "${p}-sw"
  ip -n "${p}-sw" link set ctl master br0 up
  ip addr add "${s}.1/24" dev "${p}-ctl"
  ip link set "${p}-ctl" up
  local m name hb
  for m in "$@"; do
    name=${m%%:*}; hb=${m##*:}
    ip netns add "${p}-${name}"
    ip -n "${p}-${name}" link set lo up
    ip -n "${p}-sw" link add "v-${name}" type veth peer name eth0 netns "${p}-${name}"
    ip -n "${p}-sw" link set "v-${name}" master br0 up
    ip -n "${p}-${name}" addr add "${s}.${hb}/24" dev eth0
    ip -n "${p}-${name}" link set eth0 up
  done
}

# Kill every process inside the member namespaces (TERM, then KILL after
# MWH_TERM_GRACE_S, default 2 s). Idempotent: missing namespaces are skipped.
mwh_kill_netns_procs() {
  local ns pids tenths
  tenths=$(awk -v g="${MWH_TERM_GRACE_S:-2}" 'BEGIN { printf "%d", g * 10 }')
  for ns in "$@"; do
    [[ -e /run/netns/$ns ]] || continue
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    # shellcheck disable=SC2086 # a list of pids
    [[ -n ${pids// } ]] && kill -TERM $pids 2>/dev/null
  done
  for _ in $(seq 1 "$tenths"); do
    local left=""
    for ns in "$@"; do
      [[ -e /run/netns/$ns ]] || continue
      left+=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    done
    [[ -z ${left// } ]] && return 0
    sleep 0.1
  done
  for ns in "$@"; do
    [[ -e /run/netns/$ns ]] || continue
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    # shellcheck disable=SC2086 # a list of pids
    [[ -n ${pids// } ]] && kill -KILL $pids 2>/dev/null
  done
  sleep 0.2
}

mwh_net_down() {
  local p=$1
  local all
  all=$(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${p}-" || true)
  # shellcheck disable=SC2086
  mwh_kill_netns_procs $all
  local ns
  for ns in $all; do
    [[ $ns == "${p}-sw" ]] && continue
    ip netns del "$ns" 2>/dev/null || true
  done
  [[ -e /run/netns/${p}-sw ]] && ip netns del "${p}-sw" 2>/dev/null
  # The veth dies with the switch namespace; delete it anyway if the
  # switch was never made (a failed 'up').
  ip link del "${p}-ctl" 2>/dev/null || true
  # A namespace is freed when its last user goes; wait for the veth.
  for _ in $(seq 1 30); do
    ip link show "${p}-ctl" >/dev/null 2>&1 || return 0
    sleep 0.1
  done
  echo "warning: link ${p}-ctl still present" >&2
  return 1
}

# What is left for prefix P: namespaces, root link, processes in them.
mwh_leftovers() {
  local p=$1
  ip netns list 2>/dev/null | awk '{print "netns " $1}' | grep " ${p}-" || true
  ip -o link show 2>/dev/null | awk -F': ' '{print "link " $2}' | grep " ${p}-" || true
}
