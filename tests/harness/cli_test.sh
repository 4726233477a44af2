#!/usr/bin/env bash
# mwchaos's command line: usage errors, invalid scenarios (exit 2 with file:line), scenario code
# past its time budget or memory cap, a wrong expectation (exit 1 and a JUnit failure naming the
# world and the numbers), a failing Lua hook, re-rendering a saved report, and a GPU scenario on a
# machine without a GPU (exit 3).
# Usage: cli_test.sh <mwchaos> <source dir> <scratch dir>
set -uo pipefail
mwchaos=$1
src=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# expect_rc <code> <description> <command...>: runs it, keeps stdout+stderr in $out.
expect_rc() {
  local want=$1 what=$2
  shift 2
  out=$("$@" 2>&1)
  local rc=$?
  if [ "$rc" != "$want" ]; then
    fail "$what: exit $rc, expected $want; output:"
    echo "$out" | head -20
  fi
}

expect_out() {
  local what=$1 pattern=$2
  if ! grep -qE -- "$pattern" <<<"$out"; then
    fail "$what: output lacks /$pattern/; output:"
    echo "$out" | head -20
  fi
}

# Usage.
expect_rc 0 "--help" "$mwchaos" --help
expect_out "--help" "exit codes"
expect_out "--help" "--backend B"
expect_out "--help" "--lua-time-budget-ms N"
expect_out "--help" "\(default: 10000\)"
expect_out "--help" "--lua-memory-mb N .*\(default: 256\)"
# Every subcommand answers --help (and -h) with the usage, exit 0, wherever the flag stands.
for cmd in run validate list report "hosts check" "hosts clean"; do
  for flag in --help -h; do
    # shellcheck disable=SC2086
    expect_rc 0 "$cmd $flag" "$mwchaos" $cmd $flag
    expect_out "$cmd $flag" "^usage: mwchaos <command>"
    expect_out "$cmd $flag" "^  ${cmd%% *} "
  done
done
expect_rc 0 "hosts clean in --help" "$mwchaos" --help
expect_out "hosts clean in --help" "hosts clean --hosts FILE"
for flag in --help -h; do
  expect_rc 0 "agent $flag" "$mwchaos" agent $flag
  expect_out "agent $flag" "^usage: mwchaos agent --stdio \[--dev IF\]"
  expect_out "agent $flag" "removes what agents that died on this host left"
done
expect_rc 0 "mw_worker --help" "$(dirname "$mwchaos")/mw_worker" --help
expect_out "mw_worker --help" "^usage: mw_worker --config"
expect_rc 2 "agent by hand" "$mwchaos" agent
expect_out "agent by hand" "agent: --stdio is required"
expect_rc 2 "agent --dev not an interface" "$mwchaos" agent --stdio --dev 'eth0" x'
expect_out "agent --dev not an interface" "agent: --dev 'eth0\" x' is no interface name"
expect_rc 2 "hosts without a subcommand" "$mwchaos" hosts --hosts x.lua
expect_out "hosts without a subcommand" "hosts check --hosts FILE, or hosts clean --hosts FILE"
expect_rc 2 "hosts clean without --hosts" "$mwchaos" hosts clean
expect_out "hosts clean without --hosts" "hosts clean needs --hosts FILE"
expect_rc 2 "no command" "$mwchaos"
expect_out "no command" "no command given"
expect_rc 2 "unknown option" "$mwchaos" run --frobnicate x.lua
expect_out "unknown option" "unknown option '--frobnicate'"
expect_rc 2 "unknown command" "$mwchaos" explode
expect_rc 2 "bad seed" "$mwchaos" run --seed -3 "$src/scenarios"
expect_out "bad seed" "--seed: expected a whole number from 0 to 9007199254740991, got '-3'"
# Numbers have ranges (docs/scenarios.md, "Limits"): a seed past 2^53-1 (1e300, 2^64, 2^53) or a
# duration past 24 h is a usage error, never a run that wraps around (10000000h once ran for 0.1 s
# and passed).
for seed in 1e300 18446744073709551616 18446744073709551615 9007199254740992; do
  expect_rc 2 "seed $seed" "$mwchaos" validate --seed "$seed" "$src/tests/harness/fixtures/one_role.lua"
  expect_out "seed $seed" "--seed: expected a whole number from 0 to 9007199254740991, got '$seed'"
done
expect_rc 0 "largest seed" "$mwchaos" validate --seed 9007199254740991 "$src/tests/harness/fixtures/one_role.lua"
expect_rc 2 "duration of 10000000h" "$mwchaos" run -q -o "$work/never" --duration 10000000h \
  "$src/tests/harness/fixtures/one_role.lua"
expect_out "duration of 10000000h" "--duration: \"10000000h\" is out of range \(500 ms to 24 h\)"
expect_rc 2 "duration of 25h" "$mwchaos" validate --duration 25h "$src/tests/harness/fixtures/one_role.lua"
expect_out "duration of 25h" "--duration: \"25h\" is out of range \(500 ms to 24 h\)"
expect_rc 2 "duration of 1e300s" "$mwchaos" validate --duration 1e300s "$src/tests/harness/fixtures/one_role.lua"
expect_out "duration of 1e300s" "--duration: \"1e300s\" is out of range"
expect_rc 0 "duration of 24h" "$mwchaos" validate --duration 24h "$src/tests/harness/fixtures/one_role.lua"
expect_rc 2 "bad backend" "$mwchaos" run --backend mpi "$src/scenarios"
expect_rc 2 "bad format" "$mwchaos" run --format pdf "$src/scenarios"
expect_rc 2 "bad duration" "$mwchaos" run --duration soon "$src/scenarios"
expect_out "bad duration" "--duration: expected a duration"
expect_rc 2 "bad time budget" "$mwchaos" validate --lua-time-budget-ms 0 "$src/scenarios"
expect_out "bad time budget" "--lua-time-budget-ms: expected a whole number of milliseconds from 1 to 86400000, got '0'"
expect_rc 2 "bad memory cap" "$mwchaos" run --lua-memory-mb 1.5 "$src/scenarios"
expect_out "bad memory cap" "--lua-memory-mb: expected a whole number of MiB from 1 to 1048576, got '1.5'"
expect_rc 2 "memory cap without a value" "$mwchaos" validate --lua-memory-mb
expect_out "memory cap without a value" "--lua-memory-mb: expected a whole number"
expect_rc 2 "missing file" "$mwchaos" validate /nonexistent.lua
expect_out "missing file" "no such file or folder: /nonexistent.lua"
# --hosts (docs/hosts.md): a missing or invalid inventory, or a scenario host it does not bind, is
# a usage error (exit 2) naming the file, the line and the field, before anything runs.
partition=$src/scenarios/net_partition_heals.lua
expect_rc 2 "--hosts, missing file" "$mwchaos" run -q -o "$work/never" --hosts /nonexistent-hosts.lua "$partition"
expect_out "--hosts, missing file" "^/nonexistent-hosts.lua: cannot open the inventory: No such file"
printf 'return {\n  launcher = "ssh",\n  hosts = { h1 = "node1" },\n  lease_ms = 5,\n}\n' >"$work/bad_hosts.lua"
expect_rc 2 "--hosts, bad file" "$mwchaos" run -q -o "$work/never" --hosts "$work/bad_hosts.lua" "$partition"
expect_out "--hosts, bad file" "^$work/bad_hosts.lua:4: lease_ms: 5 is out of range \(100 to 60000\)"
printf 'return { launcher = "ssh", hosts = { h0 = "n0", h1 = "n1" } }\n' >"$work/two_hosts.lua"
expect_rc 2 "--hosts, host not bound" "$mwchaos" validate --hosts "$work/two_hosts.lua" "$partition"
expect_out "--hosts, host not bound" "^$partition: the scenario's host h2 is not in $work/two_hosts.lua \(it binds h0, h1\)"
printf 'return { launcher = "ssh", hosts = { h0 = "n0", h1 = "n1", h2 = "n2" } }\n' >"$work/hosts.lua"
expect_rc 0 "--hosts, every host bound" "$mwchaos" validate --hosts "$work/hosts.lua" "$partition"
# scancel_step (a Slurm step's cancel) is valid in a file, but runs only with launcher "slurm".
scancel=$src/tests/hosts/scenarios/hosts_scancel.lua
expect_rc 0 "scancel_step validates without --hosts" "$mwchaos" validate "$scancel"
expect_rc 2 "scancel_step run without --hosts" "$mwchaos" run -q -o "$work/never" "$scancel"
expect_out "scancel_step run without --hosts" \
  "^$scancel:18: scancel_step needs the slurm launcher .*run it with --hosts and an inventory of launcher = \"slurm\""
expect_rc 2 "scancel_step with the ssh launcher" "$mwchaos" validate --hosts "$work/hosts.lua" "$scancel"
expect_out "scancel_step with the ssh launcher" "^$scancel:18: .*the inventory's launcher is \"ssh\""
[[ -e $work/never ]] && fail "a refused run wrote $work/never"
expect_rc 2 "--hosts for report" "$mwchaos" report --hosts "$work/hosts.lua" x.json
expect_out "--hosts for report" "--hosts is for run, validate and hosts check/clean, not report"
expect_rc 2 "hosts check without --hosts" "$mwchaos" hosts check
expect_out "hosts check without --hosts" "hosts check needs --hosts FILE"
expect_rc 2 "hosts without check" "$mwchaos" hosts --hosts "$work/hosts.lua"
expect_out "hosts without check" "hosts takes one subcommand: hosts check --hosts FILE"
expect_rc 2 "hosts check, a bad inventory" "$mwchaos" hosts check --hosts "$work/nonexistent.lua"
printf 'return { launcher = "netns" }\n' >"$work/netns.lua"
expect_rc 0 "hosts check of this machine" "$mwchaos" hosts check --hosts "$work/netns.lua"
expect_out "hosts check of this machine" "one fault: median [0-9.]+ ms"
expect_rc 0 "list" "$mwchaos" list
expect_out "list" "pause\(role\)"
expect_out "list" "gather_to_leader"
expect_out "list" "program = \{ \"python3\", \"serve.py\""

# Every scenario of the library is valid, with other limits too.
expect_rc 0 "validate the library" "$mwchaos" validate "$src/scenarios"
expect_rc 0 "validate the library with limits" "$mwchaos" validate --lua-time-budget-ms 60000 \
  --lua-memory-mb 32 "$src/scenarios"

# Invalid scenarios: exit 2, "file:line: what".
inv=$src/tests/harness/invalid
check_invalid() {
  local file=$1 line=$2 pattern=$3
  expect_rc 2 "invalid $file" "$mwchaos" validate "$inv/$file"
  expect_out "invalid $file" "$inv/$file:$line: .*$pattern"
  # run refuses it the same way, before starting anything
  expect_rc 2 "run invalid $file" "$mwchaos" run -q -o "$work/never" "$inv/$file"
}
check_invalid syntax_error.lua 5 "'}' expected"
check_invalid unknown_field.lua 3 "worlds.w1.heartbeet: unknown field"
check_invalid no_members.lua 3 "worlds.w2: world has no members"
check_invalid rank_collision.lua 3 "rank 1 is taken by more than one role \(b and c\)"
check_invalid past_end.lua 8 "past the end of the scenario"
check_invalid bad_duration.lua 3 "heartbeat: expected a duration"
check_invalid unknown_role.lua 6 "no role 'nobody'"
check_invalid lua_error.lua 2 "attempt to perform arithmetic"
check_invalid no_scenario.lua 1 "exactly once \(found 0\)"
check_invalid bad_signal.lua 5 "unknown signal \"SIGWHATEVER\""
check_invalid bandwidth_rate_words.lua 5 "bandwidth\(host, rate\): rate like \"10mbit\" or \"1gbit\" \(a number and a unit\), got \"10mbit burst 1\""
check_invalid scancel_no_host.lua 5 "scancel_step: role 'b' has no host; a Slurm step holds a host's agent"
check_invalid scancel_shared_host.lua 6 "scancel_step: role 'b' shares host 'h2' with c; one srun step holds all"
check_invalid scancel_stop.lua 5 "scancel_step: SIGSTOP does not end a step"
check_invalid posix_write.lua 6 "POSIX point 'posix/io/rw/write' is not offered \(the worker's control fifo.*POSIX points: posix/io/rw/writev, "
check_invalid posix_no_errno.lua 6 "mode.failnum: unknown field"
check_invalid binary_chunk.lua 3 "attempt to load a binary chunk"
check_invalid deep_tables.lua 5 "tables nested more than 32 deep"
check_invalid star_bad_field.lua 1 "star: unknown field 'heartbeat'"
check_invalid two_patterns.lua 7 "world .w1. already carries broadcast \(.*two_patterns.lua:6\); a world carries one traffic pattern"
check_invalid table_cycle.lua 4 "a table contains itself"
check_invalid string_dump.lua 2 "attempt to call a nil value \(field 'dump'\)"
# Program roles: each error names the field, the file and the line.
check_invalid program_missing.lua 6 "roles.app.program\[1\]: '$inv/no-such-program' does not exist"
check_invalid program_not_executable.lua 6 "program\[1\]: '$inv/program_not_executable.lua' is not an executable file"
check_invalid program_not_in_path.lua 6 "program\[1\]: 'mw-no-such-program-anywhere' is not an executable file in PATH"
# PATH is searched as execvp searches it (chaos::onPath): a directory of the program's name is
# not the program; an empty entry is the current directory.
mkdir -p "$work/pathdir/mw-no-such-program-anywhere" "$work/bindir"
expect_rc 2 "a directory on PATH is not the program" \
  env PATH="$work/pathdir:$PATH" "$mwchaos" validate "$inv/program_not_in_path.lua"
expect_out "a directory on PATH" "is not an executable file in PATH"
printf '#!/bin/sh\nexit 0\n' >"$work/bindir/mw-no-such-program-anywhere"
chmod +x "$work/bindir/mw-no-such-program-anywhere"
expect_rc 0 "an empty PATH entry is the current directory" \
  sh -c 'cd "$1" && PATH=":$PATH" exec "$2" validate "$3"' sh "$work/bindir" "$mwchaos" \
  "$inv/program_not_in_path.lua"
check_invalid program_empty.lua 6 "roles.app.program: expected a command as a list of strings .*got an empty list"
check_invalid program_not_string.lua 6 "roles.app.program\[2\]: expected a string, got 3"
check_invalid program_unknown_placeholder.lua 6 "program\[3\]: unknown placeholder \\\$\{world.w1.host\}"
check_invalid program_not_member.lua 6 "placeholder .*world.w2.port.*: role 'app' is not a member of world 'w2'"
check_invalid program_malformed_placeholder.lua 7 "roles.app.env.PORT: '\\\$\{' without its closing '\}'"
check_invalid program_env_not_string.lua 8 "roles.app.env.COUNT: expected a string, got 3"
check_invalid program_env_reserved.lua 7 "roles.app.env.MW_TELEMETRY_FD: the harness sets MW_TELEMETRY_FD itself"
check_invalid env_without_program.lua 6 "roles.a.env: only a program role \(program = \{ ... \}\) takes env, cwd and stop_within"
check_invalid program_cwd.lua 7 "roles.app.cwd: '$inv/no-such-directory' is not a directory"
check_invalid program_traffic.lua 9 "traffic\[1\]: world 'w1' has program role 'app' as a member"
check_invalid program_remove_world.lua 6 "remove_world: role 'app' runs a program; remove_world and add_world are commands to mw_worker"
check_invalid program_failpoint.lua 6 "failpoint: role 'app' runs a program; POSIX failpoints .* need mw_worker's libfiu preload"
check_invalid throughput_metric_worker.lua 7 "expect.throughput\[1\].role: role 'a' runs mw_worker; only a program role reports its own metrics"
check_invalid throughput_metric_name.lua 7 "expect.throughput\[1\].metric: expected the name a program reports"
check_invalid throughput_metric_and_world.lua 7 "expect.throughput\[1\]: give world .* or metric and role .*, not both"
check_invalid data_intact_false.lua 6 "expect.data_intact: expected true, \{ every_element = true \} or \{ off = \"why it cannot hold here\" \}: turning it off takes a reason, not false"
check_invalid data_intact_empty_reason.lua 6 "expect.data_intact: .*: off must say why \(a non-empty string\)"
check_invalid app_checks_no_program.lua 6 "expect.app_checks: no role runs a program"
check_invalid data_intact_unknown_field.lua 6 "expect.data_intact.reason: unknown field \(expected one of: off, every_element\)"
# Numbers out of their ranges (docs/scenarios.md, "Limits"), and a NUL byte in a string.
check_invalid huge_at.lua 6 "timeline\[1\] time: 1e\+300 s is out of range \(0 to 24 h\)"
check_invalid huge_at_inf.lua 6 "timeline\[1\] time: inf s is out of range \(0 to 24 h\)"
check_invalid huge_at_string.lua 6 "timeline\[1\] time: \"1e300s\" is out of range \(0 to 24 h\)"
check_invalid nan_rate.lua 6 "traffic\[1\].rate: nan is out of range \(0 to 1000000 operations per second\)"
check_invalid huge_heartbeat.lua 3 "worlds.w1.heartbeat: \"1e15s\" is out of range \(50 ms to 1 h\)"
check_invalid inf_op_timeout.lua 4 "worlds.w1.op_timeout: inf s is out of range \(1 ms to 24 h\)"
check_invalid huge_seed.lua 3 "seed: 18446744073709551616 is out of range \(0 to 9007199254740991\)"
check_invalid huge_seed_1e300.lua 5 "seed: 1e\+300 is out of range \(0 to 9007199254740991\)"
check_invalid program_nul.lua 6 "roles.app.program\[2\]: \"a\\\\0b\" holds a NUL byte"
# Lua shortens long file names in its own messages; the harness gives the whole path back.
long="$work/a-folder-whose-name-is-long-enough-that-lua-would-cut-it/and-deeper"
mkdir -p "$long"
cp "$inv/syntax_error.lua" "$inv/lua_error.lua" "$long/"
expect_rc 2 "syntax error under a long path" "$mwchaos" validate "$long/syntax_error.lua"
expect_out "syntax error under a long path" "^$long/syntax_error.lua:5: '}' expected"
expect_rc 2 "Lua error under a long path" "$mwchaos" validate "$long/lua_error.lua"
expect_out "Lua error under a long path" "^$long/lua_error.lua:2: attempt to perform arithmetic"

# Scenario code runs under a time budget per entry and a memory cap. An endless loop (one that
# catches the budget's error with pcall included), a finalizer or a memory bomb makes the file
# invalid, quickly, with a clear error. A hang is killed (mwchaos traps SIGTERM) and fails the test.
limited() { timeout -s KILL 30 "$mwchaos" "$@"; }
budget="scenario code exceeded its time budget of 200 ms \(mwchaos --lua-time-budget-ms N changes it\)"
memory="scenario code exceeded its memory cap of 16 MiB \(mwchaos --lua-memory-mb N changes it\)"
# check_limit <file> <line, as a regex: "" for none> <pattern> <flags...>
check_limit() {
  local file=$1 line=$2 pattern=$3
  shift 3
  expect_rc 2 "limit $file" limited validate "$@" "$inv/$file"
  expect_out "limit $file" "^$inv/$file$line: $pattern"
  expect_rc 2 "run limit $file" limited run -q -o "$work/never" "$@" "$inv/$file"
}
check_limit load_loop.lua ":[45]" "$budget" --lua-time-budget-ms 200
check_limit pcall_loop.lua ":[345]" "$budget" --lua-time-budget-ms 200
check_limit gc_loop.lua ":3" "setmetatable: a metatable with __gc is not allowed" --lua-time-budget-ms 200
check_limit memory_string.lua "" "$memory" --lua-memory-mb 16
check_limit memory_table.lua "" "$memory" --lua-memory-mb 16
# Loops in C, where no hook runs: string.rep of empty pieces returns at once (the loop after it
# meets the budget), table.insert, table.remove and table.move look at the deadline as they go,
# and an endless xpcall handler is no way out either.
n=0
while IFS= read -r code; do
  n=$((n + 1))
  f="$work/c_loop_$n.lua"
  printf '%s\nscenario { name = "x", worlds = { w = {} }, roles = { a = { worlds = { w = 0 } } } }\n' \
    "$code" >"$f"
  expect_rc 2 "C loop $n: $code" limited validate --lua-time-budget-ms 200 "$f"
  expect_out "C loop $n: $code" "^$f:1: $budget"
done <<'EOF'
local s = string.rep("", math.maxinteger) while true do end
table.move({}, 1, math.maxinteger - 10, 2)
table.insert(setmetatable({}, { __len = function() return math.maxinteger - 1 end }), 1, 0)
table.remove(setmetatable({}, { __len = function() return math.maxinteger - 1 end }), 1)
while true do xpcall(function() while true do end end, function() while true do end end) end
EOF
[ -e "$work/never" ] && fail "an invalid scenario wrote reports"

# A wrong expectation: exit 1, a JUnit failure that names the world and what happened.
fx=$src/tests/harness/fixtures
expect_rc 1 "wrong expectation" "$mwchaos" run -q -o "$work/wrong" "$fx/wrong_expectation.lua"
expect_out "wrong expectation" "FAIL +a wrong expectation fails"
junit=$work/wrong/wrong_expectation/junit.xml
if ! grep -q '<failure message="world w1 was expected to break but no member reported it broken"' "$junit"; then
  fail "wrong expectation: junit has no failure for w1"; cat "$junit"
fi
if ! grep -q '<failure message="world w2 broke at [0-9.]* s (peer_died' "$junit"; then
  fail "wrong expectation: junit has no failure with w2's numbers"; cat "$junit"
fi
grep -q 'failures="2"' "$work/wrong/junit.xml" || fail "combined junit.xml does not count 2 failures"
[ -s "$work/wrong/wrong_expectation/report.html" ] || fail "no HTML report"
grep -q '<svg' "$work/wrong/wrong_expectation/report.html" || fail "HTML report has no SVG timeline"

# The saved report is re-evaluated and re-rendered with the same verdict.
rm "$work/wrong/wrong_expectation/report.html"
expect_rc 1 "report re-render" "$mwchaos" report "$work/wrong/wrong_expectation/report.json"
[ -s "$work/wrong/wrong_expectation/report.html" ] || fail "report did not write the HTML again"
# --format github: an ::error annotation at the failed expectation's file and line, and the verdict
# table appended to $GITHUB_STEP_SUMMARY (docs/ci.md).
summary=$work/summary.md
echo "# earlier step" >"$summary"
expect_rc 1 "github format" env GITHUB_STEP_SUMMARY="$summary" \
  "$mwchaos" report --format json,github "$work/wrong/wrong_expectation/report.json"
expect_out "github format" "^::error file=[^,]*wrong_expectation.lua,line=13,title=mwchaos%3A a wrong expectation fails%3A world w1 breaks::fail: world w1 was expected to break"
expect_out "github format" "^::error file=[^,]*wrong_expectation.lua,line=13,title=.*world w2 stays healthy::fail: world w2 broke at"
grep -q "^# earlier step" "$summary" || fail "github format: the summary file was overwritten, not appended to"
grep -q "^| ❌ fail | a wrong expectation fails | .*wrong_expectation.lua\` | [0-9]*/[0-9]* |" "$summary" ||
  { fail "github format: no verdict row in the summary"; cat "$summary"; }
grep -q "^| a wrong expectation fails | world w1 breaks | fail | healthy | broken |" "$summary" ||
  { fail "github format: no row for the failed expectation"; cat "$summary"; }
expect_rc 3 "github format without GITHUB_STEP_SUMMARY" env -u GITHUB_STEP_SUMMARY \
  "$mwchaos" report --format json,github "$work/wrong/wrong_expectation/report.json"
expect_out "github format without GITHUB_STEP_SUMMARY" "GITHUB_STEP_SUMMARY is not set"
echo '{"not": "a report"}' >"$work/garbage.json"
expect_rc 2 "report of garbage" "$mwchaos" report "$work/garbage.json"
expect_out "report of garbage" "not a multiworld chaos report"

# A throughput verdict that the evidence cannot settle: exit 4, a JUnit skip that says so, a GitHub
# warning; --rerun-inconclusive runs it again, prints each rerun and counts it in the report.
expect_rc 2 "rerun count too high" "$mwchaos" run --rerun-inconclusive 11 "$fx/inconclusive_throughput.lua"
expect_out "rerun count too high" "--rerun-inconclusive: expected a whole number from 0 to 10, got '11'"
expect_rc 2 "rerun count not a number" "$mwchaos" run --rerun-inconclusive x "$fx/inconclusive_throughput.lua"
expect_rc 4 "inconclusive" "$mwchaos" run -q -o "$work/inconclusive" --rerun-inconclusive 1 \
  "$fx/inconclusive_throughput.lua"
expect_out "inconclusive" "^RERUN too little evidence for a throughput verdict: inconclusive, run 2 of at most 2"
expect_out "inconclusive" "^INCONCLUSIVE +too little evidence"
expect_out "inconclusive" "too few windows before the fault for a control"
rep=$work/inconclusive/inconclusive_throughput
grep -q '"reruns": 1' "$rep/report.json" || fail "inconclusive: the report does not count its rerun"
grep -q '<skipped message="inconclusive: ' "$rep/junit.xml" || fail "inconclusive: no JUnit skip"
grep -q '<failure' "$rep/junit.xml" && fail "inconclusive: JUnit has a failure"
expect_rc 4 "inconclusive report" env GITHUB_STEP_SUMMARY="$work/summary2.md" \
  "$mwchaos" report --format json,github "$rep/report.json"
expect_out "inconclusive report" "^::warning file=[^,]*inconclusive_throughput.lua,line=15,"
grep -q "^| ❔ inconclusive | too little evidence" "$work/summary2.md" ||
  fail "inconclusive: no summary row"
# A failure outranks it: exit 1 when one scenario fails and another is inconclusive.
expect_rc 1 "fail outranks inconclusive" "$mwchaos" run -q --format json -o "$work/both" \
  "$fx/inconclusive_throughput.lua" "$fx/wrong_expectation.lua"

# A Lua check hook that fails: exit 1 with its message.
expect_rc 1 "failing hook" "$mwchaos" run -q --format json -o "$work/hook" "$fx/failing_check.lua"
expect_out "failing hook" "expect.check hook: w1 broken = false"

# A check hook that loops forever: its budget ends it and fails it, and the run still writes its
# reports.
expect_rc 1 "looping hook" limited run -q --lua-time-budget-ms 200 -o "$work/hookloop" "$fx/check_loop.lua"
expect_out "looping hook" "fail +expect.check hook: expect.check failed: $fx/check_loop.lua:11: $budget"
grep -q '<failure message="expect.check failed: .*time budget of 200 ms' "$work/hookloop/check_loop/junit.xml" ||
  fail "looping hook: junit has no failure for the hook"
[ -s "$work/hookloop/check_loop/report.json" ] || fail "looping hook: no report.json"


# A nemesis's planned timeline comes from the seed: the same seed replays it exactly (compared
# between two reports), another seed draws another one.
timeline() { python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["scenario"]["timeline"]))' "$1"; }
for run in a b; do
  expect_rc 0 "nemesis seed 7 ($run)" "$mwchaos" run -q --seed 7 --format json -o "$work/nem7$run" "$fx/nemesis_short.lua"
done
expect_rc 0 "nemesis seed 8" "$mwchaos" run -q --seed 8 --format json -o "$work/nem8" "$fx/nemesis_short.lua"
t7a=$(timeline "$work/nem7a/nemesis_short/report.json")
t7b=$(timeline "$work/nem7b/nemesis_short/report.json")
t8=$(timeline "$work/nem8/nemesis_short/report.json")
[ -n "$t7a" ] && [ "$t7a" != "[]" ] || fail "nemesis: the report has no planned timeline"
[ "$t7a" = "$t7b" ] || fail "nemesis: seed 7 drew two different timelines: $t7a vs $t7b"
[ "$t7a" != "$t8" ] || fail "nemesis: seeds 7 and 8 drew the same timeline"

# A worker that hangs when told to stop is killed with its whole process group after the grace
# period, and the run fails "no process hangs" naming it; nothing is left behind.
expect_rc 1 "hanging worker" "$mwchaos" run --format json -o "$work/hang" \
  --worker "$src/tests/harness/fixtures/hanging_worker.sh" "$fx/one_role.lua"
expect_out "hanging worker" "fail +no process hangs: did not exit within 5 s of being told to stop \(killed\): a"
expect_out "hanging worker" "pass +no orphan process or file is left"
if pgrep -f "hanging_worker.sh" >/dev/null; then fail "hanging worker: its process is still there"; fi

# A worker that writes lines the harness cannot parse: an error in the report, not a crash.
expect_rc 1 "garbling worker" "$mwchaos" run --format json -o "$work/garble" \
  --worker "$src/tests/harness/fixtures/garbling_worker.sh" "$fx/one_role.lua"
expect_out "garbling worker" "error +the harness ran the scenario: role 'a' wrote a line that is not the worker protocol \(worker line 'metrics': time 'notanumber' is not a whole number\): 'metrics notanumber"
expect_out "garbling worker" "99999999999999999999999"
[ -s "$work/garble/one_role/report.json" ] || fail "garbling worker: no report"

# Network scenarios need root: as an unprivileged user the run exits 3 saying so.
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && as_nobody "$mwchaos" --help >/dev/null 2>&1 &&
  as_nobody test -r "$src/scenarios/net_silent_partition.lua"; then
  mkdir -p "$work/nobody" && chmod 777 "$work/nobody"
  expect_rc 3 "network scenario without root" setpriv --reuid=65534 --regid=65534 --clear-groups \
    "$mwchaos" run -q -o "$work/nobody/out" "$src/scenarios/net_silent_partition.lua"
  expect_out "network scenario without root" "simulated hosts: .*need root"
else
  echo "note: the unprivileged run was not tried (not root, or the build is not readable by nobody)"
fi

# A network fault that a host did late says so in its note, naming each slow host with the time
# from the sending to the rules in force there, and how much of it the host spent doing it (so a
# late partition shows whether the host or the controller took the time). The agents here take
# 300 ms more per request (MW_AGENT_TEST_NET_DELAY_MS, a test hook of the agent).
if [ "$(id -u)" = 0 ]; then
  expect_rc 0 "slow agents" env MW_AGENT_TEST_NET_DELAY_MS=300 \
    "$mwchaos" run -q --format json -o "$work/slow" "$fx/slow_agents_partition.lua"
  slow=$(python3 - "$work/slow/slow_agents_partition/report.json" <<'PY' 2>&1
import json, re, sys
faults = json.load(open(sys.argv[1]))["run"]["faults"]
for f in faults:
    hosts = dict((h, (int(t), int(d))) for h, t, d in re.findall(
        r"(h[01]) in force (\d+) ms after it was sent \((\d+) ms of it doing it, its answer read \d+ ms later\)", f["note"]))
    ok = sorted(hosts) == ["h0", "h1"] and all(t >= 300 and 300 <= d <= t for t, d in hosts.values())
    # ... and moves the rest of the timeline and the run's end as much later.
    late = re.search(r"in force (\d+) ms after its time: the rest of the timeline", f["note"])
    ok = ok and late is not None and int(late.group(1)) >= 300
    print(f["kind"], "ok" if ok and f["outcome"] == "ok" else "bad: " + f["outcome"] + ": " + f["note"])
run = json.load(open(sys.argv[1]))["run"]
heal = run["faults"][1]
# The heal was sent at its time plus the partition's lateness; the run lasted 3 s plus both.
print("moved" if heal["sent_s"] >= 2.3 and run["duration_s"] >= 3.6 and run["elapsed_s"] >= run["duration_s"]
      else "not moved: heal sent at %.3f s, duration %.3f s" % (heal["sent_s"], run["duration_s"]))
PY
  )
  [ "$slow" = "$(printf 'partition ok\nheal ok\nmoved')" ] || fail "slow agents: the notes say: $slow"
fi

# A partition that one host did and the other could not is an error, never "skipped", naming the
# failure and the host where it is in force nonetheless. h0's cut fails here: its agent refuses a
# cut naming h1's address (MW_AGENT_TEST_NET_FAIL_PEER, a test hook of the agent; the simulated
# hosts are numbered from 10.201.0.2 in name order).
if [ "$(id -u)" = 0 ]; then
  expect_rc 1 "partition done in part" env MW_AGENT_TEST_NET_FAIL_PEER=10.201.0.3 \
    "$mwchaos" run -q --format json -o "$work/partial" "$fx/slow_agents_partition.lua"
  partial=$(python3 - "$work/partial/slow_agents_partition/report.json" <<'PY' 2>&1
import json, sys
report = json.load(open(sys.argv[1]))
f = report["run"]["faults"][0]
want = "error: cutting 10.201.0.3 failed (MW_AGENT_TEST_NET_FAIL_PEER, a test hook) (done on h1 nonetheless)"
verdicts = dict((e["name"], e["status"]) for e in report["expectations"])
print("ok" if f["kind"] == "partition" and f["outcome"] == want and report["verdict"] == "fail"
      and verdicts.get("fault delivered: silent partition {h0} | {h1}") == "error"
      else "bad: %s: %s; %s, %s" % (f["kind"], f["outcome"], report["verdict"], verdicts))
PY
  )
  [ "$partial" = ok ] || fail "partition done in part: $partial"
fi

# A signal ends a role only when it ends the process: SIGUSR1 does (the leader alone must see w1
# break), SIGPIPE (ignored by the runtime) and SIGURG (ignored by default) do not. The report
# records it per fault.
expect_rc 0 "signals that end roles" "$mwchaos" run -q --format json -o "$work/signals" "$fx/signals_end_roles.lua"
ends=$(python3 -c 'import json,sys; print(" ".join(f["action"].split()[-1] + "=" + str(f["ends_role"]) for f in json.load(open(sys.argv[1]))["run"]["faults"]))' \
  "$work/signals/signals_end_roles/report.json" 2>&1)
[ "$ends" = "SIGUSR1=True SIGPIPE=False SIGURG=False" ] || fail "signals: ends_role per fault is '$ends'"

# A report folder that cannot be written: exit 3 at once, before any scenario runs.
SECONDS=0
expect_rc 3 "unwritable report" "$mwchaos" run -q -o /dev/null/out "$src/scenarios/leader_killed.lua"
expect_out "unwritable report" "cannot write reports to /dev/null/out: .*nothing was run"
[ "$SECONDS" -le 2 ] || fail "unwritable report: the scenario ran first (${SECONDS} s)"
mkdir -p "$work/readonly" && chmod 555 "$work/readonly"
if [ "$(id -u)" != 0 ]; then  # root writes anywhere
  expect_rc 3 "read-only report folder" "$mwchaos" run -q -o "$work/readonly" "$fx/one_role.lua"
fi
# A link at a report's path is replaced, never written through; --seed lands in the report.
mkdir -p "$work/linked/leader_killed"
echo "precious" >"$work/precious.txt"
ln -s "$work/precious.txt" "$work/linked/leader_killed/report.json"
expect_rc 0 "report over a link" "$mwchaos" run -q --seed 4242 --format json -o "$work/linked" \
  "$src/scenarios/leader_killed.lua"
grep -q '"seed": 4242' "$work/linked/leader_killed/report.json" || fail "--seed not in the report"
[ "$(cat "$work/precious.txt")" = "precious" ] || fail "a report was written through a link"
[ -L "$work/linked/leader_killed/report.json" ] && fail "the link at the report's path is still there"
ls "$work/linked/leader_killed" | grep -q 'tmp-' && fail "a temporary report file was left behind"

# A GPU scenario where there is no GPU: exit 3 naming what is missing (skipped in JUnit).
if ! nvidia-smi -L >/dev/null 2>&1; then
  expect_rc 3 "nccl without a GPU" "$mwchaos" run -q -o "$work/gpu" "$src/scenarios/nccl_remote_error.lua"
  expect_out "nccl without a GPU" "needs a GPU .* --backend gloo"
  grep -q '<skipped' "$work/gpu/junit.xml" || fail "no GPU: junit has no skipped testcase"
fi

# Lua's pattern matching runs in C, where no hook fires: a pattern that backtracks for ages would
# hang mwchaos, deaf to its time budget and to signals. The sandbox's matcher counts its steps: past
# its budget (well under a second) the call fails naming the line, while loading and in a check
# hook; and SIGINT or SIGTERM stop scenario code stuck in patterns at once (exit 130).
steps="pattern matching exceeded its budget of 100000000 steps"
SECONDS=0
check_limit pattern_backtrack.lua ":5" "string.find: $steps"
[ "$SECONDS" -le 10 ] || fail "catastrophic pattern: validate and run took $SECONDS s"
n=0
while IFS= read -r code; do
  n=$((n + 1))
  f="$work/pattern_$n.lua"
  printf '%s\nscenario { name = "x", worlds = { w = {} }, roles = { a = { worlds = { w = 0 } } } }\n' \
    "$code" >"$f"
  expect_rc 2 "pattern $n: $code" limited validate "$f"
  expect_out "pattern $n: $code" "^$f:1: string\.[a-z]+: $steps"
done <<'EOF'
local x = ("a"):rep(40):match(("a-"):rep(40) .. "b")
for w in string.gmatch(("a"):rep(30), ("(a*)"):rep(30) .. "b") do end
local s = string.gsub(("("):rep(300000), "%b()", "")
EOF
expect_rc 1 "pattern in a hook" limited run -q -o "$work/hookpattern" "$fx/check_pattern.lua"
expect_out "pattern in a hook" "fail +expect.check hook: expect.check failed: $fx/check_pattern.lua:12: string.gsub: $steps"
[ -s "$work/hookpattern/check_pattern/report.json" ] || fail "pattern in a hook: no report.json"
# stopped <what> <pid> <log>: ended (lib.sh) within 5 s; leaves its output in $out.
stopped() {
  ended "$1" "$2" 5
  out=$(cat "$3")
}
for sig in TERM INT; do
  "$mwchaos" validate --lua-time-budget-ms 600000 "$fx/pattern_stuck.lua" >"$work/stuck.log" 2>&1 &
  pid=$!
  sleep 1
  kill -"$sig" "$pid"
  stopped "SIG$sig while loading" "$pid" "$work/stuck.log"
  [ "$rc" = 130 ] || fail "SIG$sig while loading: exit $rc, expected 130"
  expect_out "SIG$sig while loading" "^$fx/pattern_stuck.lua:3: scenario code was interrupted by a signal"
  expect_out "SIG$sig while loading" "^mwchaos: interrupted while loading $fx/pattern_stuck.lua$"
done
# In a check hook (it runs once the run is over and its worker gone): the run ends interrupted.
"$mwchaos" run -q --lua-time-budget-ms 600000 -o "$work/hookstuck" "$fx/check_pattern_stuck.lua" \
  >"$work/hookstuck.log" 2>&1 &
pid=$!
started=0
for _ in $(seq 1 300); do
  if pgrep -P "$pid" >/dev/null; then started=1; elif [ "$started" = 1 ]; then break; fi
  sleep 0.1
done
sleep 0.5
kill -TERM "$pid"
stopped "SIGTERM in a hook" "$pid" "$work/hookstuck.log"
[ "$rc" = 130 ] || fail "SIGTERM in a hook: exit $rc, expected 130"
expect_out "SIGTERM in a hook" "^mwchaos: interrupted; every worker was stopped"
grep -q '"why": "interrupted while the expect.check hook ran: expect.check failed: .*check_pattern_stuck.lua:12: scenario code was interrupted by a signal"' \
  "$work/hookstuck/check_pattern_stuck/report.json" ||
  fail "SIGTERM in a hook: no report saying the hook was interrupted"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all mwchaos command-line checks passed"
