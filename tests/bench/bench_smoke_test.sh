#!/usr/bin/env bash
# mw_bench as a user runs it: every subcommand runs end to end on tiny settings, prints its table
# and writes JSON that parses with the fields docs/benchmarks.md names; usage errors exit 2 with a
# message naming the flag. Nothing here judges speed (the benchmarks' targets are not checked:
# tiny runs on a shared machine decide nothing).
#   bench_smoke_test.sh MW_BENCH WORK_DIR
set -euo pipefail
bench=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

# run NAME ARGS...: exit 0, output saved in $work/NAME.out, JSON in $work/NAME.json
run() {
  local name=$1
  shift
  "$bench" "$name" --json "$work/$name.json" "$@" >"$work/$name.out" 2>&1 ||
    { cat "$work/$name.out"; fail "mw_bench $name $* exited $?"; }
}
# field NAME PYTHON-EXPR: the expression (over the JSON document d) is true
field() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' \
    "$work/$1.json" "$2" || fail "$1.json: expected $2"
}

run overhead --calls 200 --blocks 2
grep -q "per-call cost in a one-member world" "$work/overhead.out" || fail "overhead: no table"
field overhead 'd["all_reduce"]["cpu_us_per_call"]["n"] == 2 and d["barrier"]["wall_us_per_call"]["median"] > 0'

run telemetry --calls 200 --blocks 2 --worlds 2 --idle-seconds 0.2
grep -q "idle difference (the telemetry thread)" "$work/telemetry.out" || fail "telemetry: no table"
field telemetry 'd["ratio_present_over_absent"]["n"] == 2 and d["idle_core_share_difference"]["n"] == 3 and "added_ns_per_call" in d'

run starvation --seconds 1 --hogs 1 --worlds 2 --stops 1 --heartbeat-ms 300
grep -q "false breaks" "$work/starvation.out" || fail "starvation: no table"
field starvation 'd["worlds"] == 2 and d["sigstop_detect_ms"]["n"] == 1 and isinstance(d["false_breaks"], list)'

run throughput --sizes 64K,1M --reps 2 --rep-seconds 0.02 --paired-seconds 0.01
grep -q "^1MiB" "$work/throughput.out" || fail "throughput: no 1 MiB row"
grep -q "^2. paired" "$work/throughput.out" || fail "throughput: no paired table"
field throughput 'len(d["sizes"]) == 2 and d["sizes"][1]["cpu_per_byte_runtime_over_gloo_all_reduce"]["n"] == 2'
field throughput '"send_recv_runtime_over_gloo_ge_0.98" in d["sizes"][1]["targets_pass"]'
# 16 groups at least, each with its ratio and both variants' times; the pooled ratio inside its
# interval.
field throughput 'all(len(s[k]["runtime_seconds"]) == s[k]["groups"] >= 16 and s[k]["ratio_runtime_over_gloo"]["n"] == s[k]["groups"] and s[k]["pooled_ci95_lo"] <= s[k]["pooled"] <= s[k]["pooled_ci95_hi"] for s in d["sizes"] for k in ("paired_send_recv", "paired_all_reduce"))'
field throughput 'd["config"]["scheduler"] == "default"'
if [ "$(id -u)" = 0 ]; then
  # --fifo: every thread of both processes under SCHED_FIFO, and with --pin on one CPU each, or
  # the run fails saying so.
  pin=--pin
  [ "$(nproc)" -ge 2 ] || pin=  # --pin needs two CPUs
  "$bench" throughput --sizes 64K --reps 1 --rep-seconds 0.02 --paired-seconds 0.01 --fifo $pin \
    --json "$work/fifo.json" >"$work/fifo.out" 2>&1 || { cat "$work/fifo.out"; fail "throughput --fifo $pin"; }
  grep -q "threads of both processes run under SCHED_FIFO" "$work/fifo.out" || fail "--fifo: no thread check"
  field fifo 'd["config"]["scheduler"] == "SCHED_FIFO"'
  if [ -n "$pin" ]; then
    grep -q "the agent on CPU 1 only" "$work/fifo.out" || fail "--pin: no placement check"
    field fifo 'd["config"]["pinned"] is True'
  fi
else
  # Without the privilege the run stops at once with the reason.
  rc=0
  "$bench" throughput --sizes 64K --reps 1 --fifo >"$work/fifo.out" 2>&1 || rc=$?
  [ "$rc" = 3 ] && grep -q "SCHED_FIFO" "$work/fifo.out" || fail "--fifo unprivileged: exit $rc"
fi

run two-worlds --reps 1 --size 1M --rep-seconds 0.02 --settle-ms 10 --idle-reps 1 --idle-seconds 0.2
grep -q "CPU share an idle B takes" "$work/two-worlds.out" || fail "two-worlds: no CPU share line"
field two-worlds 'd["idle_world_cpu_cores"]["n"] == 1 and "target_loss_lt_1pct_pass" in d'

# The store attacked while its world forms and works (issue 12): the world must form, stay
# healthy, and the attackers must have been turned away.
run store-attack --seconds 2 --idle 200 --slow 50 --strict
field store-attack 'd["formed"] and d["healthy"] and d["rss_growth_mib"] < 64 and d["idle_closed"] > 0 and d["slow_closed"] >= 0 and d["oversized_closed"] > 0 and d["auth_refused"] > 0'

# The same without a token (issue 21): clients that GET a 15 MiB value and never read, and a flood
# of 4,200 HELLOs past the store's 4,096 connections, under a 3 GB address-space limit.
"$bench" store-attack --json "$work/store-attack-tokenless.json" --tokenless --seconds 2 \
  --idle 100 --slow 20 --unread 100 --strict >"$work/store-attack-tokenless.out" 2>&1 ||
  { cat "$work/store-attack-tokenless.out"; fail "mw_bench store-attack --tokenless exited $?"; }
field store-attack-tokenless 'd["tokenless"] and d["formed"] and d["healthy"] and d["rss_growth_mib"] < d["rss_target_mib"] and d["unread_closed"] > 0 and d["flood"] == 4200 and d["address_space_gb"] == 3'

run creation --reps 2 --no-four
field creation 'd is not None and any(s["broken_before_removal"] for s in d["series"])'

# mw_bench nccl (built with the NCCL backend): on a simulated GPU (MW_SIM_CUDA, the tests'
# libmw_sim_cuda.so) it runs end to end; with no GPU it exits 3 and says so.
if grep -q "^  nccl " <<<"$("$bench" --help)"; then
  rc=0
  MW_CUDART_LIBRARY=/nonexistent/libcudart.so "$bench" nccl >"$work/nccl-none.out" 2>&1 || rc=$?
  [ "$rc" = 3 ] || { cat "$work/nccl-none.out"; fail "mw_bench nccl without CUDA: exit $rc, want 3"; }
  grep -q "mw_bench nccl: no NCCL to run" "$work/nccl-none.out" || fail "nccl: no reason given"
  if [ -n "${MW_SIM_CUDA:-}" ]; then
    MW_CUDART_LIBRARY=$MW_SIM_CUDA MW_NCCL_LIBRARY=$MW_SIM_CUDA \
      run nccl --calls 50 --reps 2 --sizes 64K --bytes-per-rep 1M --lag-sizes 64K --samples 5 \
      --busy-seconds 0.1
    field nccl 'd["calls"]["raw_launch_us"]["n"] == 2 and d["calls"]["runtime_waited_us"]["n"] == 2 and d["calls"]["launches_by_caller"] > 0 and len(d["bandwidth"]) == 2 and d["bandwidth"][0]["runtime_over_raw"]["n"] == 2 and len(d["completion"]) == 4 and d["completion"][0]["lag_us"]["n"] == 5 and len(d["costs"]) >= 9 and d["mechanisms"][0]["host_function_us"]["n"] == 5 and d["isolation"]["before_ops_per_window"]["n"] > 0 and d["isolation"]["victim_detect_ms"] >= 0'
    # What .ci/quickstart gpu appends to docs/benchmarks.md from that JSON.
    python3 "$(dirname "$0")/../../bench/gpu_report.py" "$work/nccl.json" "Simulated GPU" abc1234 \
      >"$work/nccl.md" || fail "gpu_report.py failed"
    grep -q "^## GPU: Simulated GPU (.*build \`abc1234\`" "$work/nccl.md" || fail "gpu_report: no heading"
    grep -q "^| all_reduce | 64 KiB | " "$work/nccl.md" || fail "gpu_report: no bandwidth row"
    grep -q "^| launch: allReduce + wait() (stream-ordered) vs the NCCL call | " "$work/nccl.md" ||
      fail "gpu_report: no launch row"
    grep -q "^| hybrid | 64 KiB | " "$work/nccl.md" || fail "gpu_report: no completion row"
    grep -q "survivor's operations per 50 ms" "$work/nccl.md" || fail "gpu_report: no isolation line"
  fi
fi

# Usage errors: exit 2, naming the flag or subcommand.
expect_usage() {
  local want=$1
  shift
  local rc=0
  "$bench" "$@" >"$work/usage.out" 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "mw_bench $*: exit $rc, want 2"
  grep -q -- "$want" "$work/usage.out" || { cat "$work/usage.out"; fail "mw_bench $*: no '$want'"; }
}
expect_usage "unknown subcommand 'nope'" nope
expect_usage "--calls" overhead --calls 0
expect_usage "--idle-reps" two-worlds --idle-reps x
expect_usage "--bogus" throughput --bogus 1
expect_usage "--paired-seconds" throughput --paired-seconds 0
expect_usage "--worlds" starvation --worlds 0
grep -q "one-member world" <<<"$("$bench" overhead --help)" || fail "overhead --help"
grep -q "MW_TELEMETRY_FD" <<<"$("$bench" telemetry --help)" || fail "telemetry --help"
expect_usage "--worlds" telemetry --worlds 0
echo "bench smoke: every subcommand ran, JSON as documented, usage errors exit 2"
