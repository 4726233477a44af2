#!/usr/bin/env bash
# Simulated remote hosts reachable over ssh, on this one machine.
#
#   ssh_hosts.sh up DIR N     make hosts h1..hN, each a network + UTS namespace
#                             (hostname hN) running its own sshd on ADDR:PORT
#   ssh_hosts.sh down DIR     kill all they run, remove namespaces and links
#                             (idempotent; safe on a half-made or absent DIR)
#
# Environment (optional):
#   MWH_SUBNET   10.X.Y of the /24 to use (default 10.202.0). Two fixtures
#                may run at once only with different subnets.
#   MWH_PORT     sshd port in every host (default 2222)
#   MWH_WAIT_S   how long 'up' waits for each sshd to answer (default 15)
#
# Files written into DIR: see README.md. Source DIR/hosts.env for the rest.
set -Eeuo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib_net.sh
source "$here/lib_net.sh"

usage() { echo "usage: $0 up DIR N | down DIR" >&2; exit 2; }

up_failed() {
  local rc=$?
  ((rc == 0)) && return
  echo "up failed; tearing down" >&2
  cmd_down "$1" >/dev/null 2>&1 || true
  exit "$rc"
}

cmd_up() {
  local dir=$1 n=$2
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || mwh_die "N must be 1..200"
  mwh_need_root
  local sshd=/usr/sbin/sshd
  [[ -x $sshd ]] || mwh_die "no $sshd: apt-get install openssh-server"
  command -v ssh >/dev/null || mwh_die "no ssh: apt-get install openssh-client"
  for b in nsenter unshare ip; do command -v "$b" >/dev/null || mwh_die "no $b (util-linux, iproute2)"; done
  local s=${MWH_SUBNET:-10.202.0} port=${MWH_PORT:-2222} wait_s=${MWH_WAIT_S:-15}
  mwh_check_subnet "$s"
  local p; p=$(mwh_prefix "$s")
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [[ ! -e $dir/hosts.env ]] || mwh_die "$dir/hosts.env exists: run 'down $dir' first"
  # Written first so that 'down' can clean up a failed 'up'.
  mwh_net_check_free "$p" "$s"
  printf 'MWH_PREFIX=%q\nMWH_SUBNET=%q\n' "$p" "$s" > "$dir/net.state"
  # Files of an earlier run in DIR would make ssh-keygen ask to overwrite.
  rm -rf "$dir"/id_ed25519 "$dir"/id_ed25519.pub "$dir"/authorized_keys \
    "$dir"/known_hosts "$dir"/ssh_config "$dir"/h[0-9]*
  # shellcheck disable=SC2064
  trap "up_failed '$dir'" EXIT
  trap 'echo "${0##*/}: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR

  local members=() i
  for ((i = 1; i <= n; i++)); do members+=("h$i:$((i + 1))"); done
  mwh_net_up "$p" "$s" "${members[@]}"

  # Keys, made per run.
  ssh-keygen -q -t ed25519 -N '' -C "mwh-client" -f "$dir/id_ed25519"
  cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
  : > "$dir/known_hosts"
  mkdir -p /run/sshd   # sshd's privilege-separation directory
  chmod 0755 /run/sshd

  {
    for ((i = 1; i <= n; i++)); do
      printf 'Host h%d\n  HostName %s.%d\n' "$i" "$s" "$((i + 1))"
    done
    cat <<EOF
Host *
  User root
  Port $port
  IdentityFile $dir/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $dir/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  LogLevel ERROR
  ConnectTimeout 5
  ControlMaster no
  ControlPath none
  ForwardAgent no
  ForwardX11 no
  RequestTTY no
EOF
  } > "$dir/ssh_config"

  local hd addr pids=()
  for ((i = 1; i <= n; i++)); do
    hd=$dir/h$i; addr=$s.$((i + 1))
    mkdir -p "$hd"
    ssh-keygen -q -t ed25519 -N '' -C "h$i" -f "$hd/ssh_host_ed25519_key"
    printf '[%s]:%d %s\n' "$addr" "$port" "$(cut -d' ' -f1,2 "$hd/ssh_host_ed25519_key.pub")" >> "$dir/known_hosts"
    cat > "$hd/sshd_config" <<EOF
Port $port
ListenAddress $addr
HostKey $hd/ssh_host_ed25519_key
PidFile $hd/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
MaxStartups 200:30:400
MaxSessions 200
LogLevel INFO
Subsystem sftp internal-sftp
EOF
    # The network namespace is the named one; the UTS namespace is new and
    # held by sshd (and inherited by every session). The mount namespace is
    # the root one: a session sees the same filesystem (unlike 'ip netns exec',
    # which remounts /sys).
    setsid nsenter --net="/run/netns/${p}-h$i" unshare --uts \
      sh -c "hostname h$i && exec $sshd -D -e -f '$hd/sshd_config'" \
      < /dev/null > "$hd/sshd.log" 2>&1 &
    pids+=($!)
  done

  # Wait until each sshd answers a command.
  local deadline ok
  for ((i = 1; i <= n; i++)); do
    deadline=$((SECONDS + wait_s)); ok=0
    while ((SECONDS < deadline)); do
      if ! kill -0 "${pids[i - 1]}" 2>/dev/null; then break; fi
      if ssh -F "$dir/ssh_config" -o ConnectTimeout=1 "h$i" true 2>/dev/null; then ok=1; break; fi
      sleep 0.05
    done
    if ((!ok)); then
      echo "sshd of h$i did not answer within ${wait_s}s; its log ($dir/h$i/sshd.log):" >&2
      sed 's/^/  /' "$dir/h$i/sshd.log" >&2 || true
      ssh -F "$dir/ssh_config" -o ConnectTimeout=1 "h$i" true || true
      false
    fi
  done
  trap - EXIT ERR

  {
    echo "# written by tests/hosts/ssh_hosts.sh up; source it"
    printf 'MWH_DIR=%q\n' "$dir"
    printf 'MWH_N=%d\n' "$n"
    printf 'MWH_SUBNET=%q\n' "$s"
    printf 'MWH_PREFIX=%q\n' "$p"
    printf 'MWH_CONTROLLER_ADDR=%q\n' "$s.1"
    printf 'MWH_CONTROLLER_LINK=%q\n' "$p-ctl"
    printf 'MWH_SSH_PORT=%d\n' "$port"
    printf 'MWH_SSH_CONFIG=%q\n' "$dir/ssh_config"
    printf 'MWH_SSH=%q\n' "ssh -F $dir/ssh_config"
    printf 'MWH_SSH_KEY=%q\n' "$dir/id_ed25519"
    printf 'MWH_KNOWN_HOSTS=%q\n' "$dir/known_hosts"
    local names="" nss="$p-sw" sp=""
    for ((i = 1; i <= n; i++)); do
      names+="${names:+ }h$i"; nss+=" $p-h$i"; sp+="${sp:+ }${pids[i - 1]}"
      printf 'MWH_H%d_ADDR=%q\n' "$i" "$s.$((i + 1))"
      printf 'MWH_H%d_NETNS=%q\n' "$i" "$p-h$i"
      printf 'MWH_H%d_SSHD_PID=%d\n' "$i" "${pids[i - 1]}"
    done
    printf 'MWH_HOSTS=%q\n' "$names"
    printf 'MWH_NETNS=%q\n' "$nss"
    printf 'MWH_PIDS=%q\n' "$sp"
  } > "$dir/hosts.env"
  cat "$dir/hosts.env"
}

cmd_down() {
  local dir=$1
  mwh_need_root
  local MWH_PREFIX="" MWH_SUBNET="" MWH_PIDS=""
  if [[ -f $dir/hosts.env ]]; then
    # shellcheck disable=SC1091
    source "$dir/hosts.env"
  elif [[ -f $dir/net.state ]]; then
    # shellcheck disable=SC1091
    source "$dir/net.state"
  else
    MWH_SUBNET=${MWH_SUBNET:-10.202.0}
    MWH_PREFIX=$(mwh_prefix "$MWH_SUBNET")
  fi
  # sshd first, by pid (they are in the namespaces too; this is belt and braces).
  local pid
  for pid in $MWH_PIDS; do kill -TERM "$pid" 2>/dev/null || true; done
  mwh_net_down "$MWH_PREFIX"
  local left; left=$(mwh_leftovers "$MWH_PREFIX")
  rm -f "$dir/hosts.env" "$dir/net.state"
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
