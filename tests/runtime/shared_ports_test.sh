#!/bin/bash
# shared_ports_test.sh RUNTIME_TEST: runs the runtime test case on shared ports in a network
# namespace of its own whose ephemeral range is 2048 ports, where the kernel lends the local port
# of one connection to others of the process many times a run (about once a run of the
# leave-at-once case in the default range). Needs root (unshare -n), which the test command has.
set -euo pipefail
test_binary=$1
exec unshare -n bash -c '
  ip link set lo up
  sysctl -q -w net.ipv4.ip_local_port_range="40000 42047"
  MW_TEST_PORT_CYCLES=200 exec "$1" "[ports]"
' shared_ports "$test_binary"
