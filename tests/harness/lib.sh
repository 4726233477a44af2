# Shared by the harness's shell tests (source it): failures counted, not fatal, and the wait for a
# signalled process to end.
failures=0
# fail <message...>: counts a failed check and says which.
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# ended <what> <pid> <seconds>: waits up to <seconds> for the signalled child <pid> to end; past
# that it fails the check and kills the process. Leaves its exit code in $rc.
ended() {
  local what=$1 pid=$2 tenths=$(($3 * 10))
  for _ in $(seq 1 "$tenths"); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    fail "$what: still running $3 s after the signal"
    kill -9 "$pid"
  fi
  wait "$pid"
  rc=$?
}
# run_fixture NAME RC: runs $fix/NAME.lua with $mwchaos (set by the caller), which must exit RC;
# its report is then $work/NAME/NAME/report.json.
run_fixture() {
  local name=$1 want=$2 out rc
  out=$(timeout -s KILL 60 "$mwchaos" run -q -o "$work/$name" "$fix/$name.lua" 2>&1)
  rc=$?
  [ "$rc" = "$want" ] || fail "$name.lua: exit $rc, expected $want; output: $out"
}
