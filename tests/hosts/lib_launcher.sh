# shellcheck shell=bash
# Shared by the launcher tests (ssh_launcher_test.sh, slurm_launcher_test.sh); sourced, not run.
# Needs `fail` (tests/harness/lib.sh), `here` (this folder) and `work` (the scratch folder).

# skip WHY: exit 77 (ctest: skipped), saying why.
skip() {
  echo "SKIPPED: $*"
  exit 77
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
