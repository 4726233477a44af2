#!/usr/bin/env bash
# flake_hunt.sh: measures the failure rate of the gate's tests by running them many times beside
# a load, each test once per run, never retried. docs/testing.md records what it measured.
#
#   tests/flake_hunt.sh [--runs N] [--load cpu|io|none] [--set gate|timing|torch2|nopyb] [--sanitizers]
#                       [--build DIR] [--venv DIR] [--out DIR] [--results FILE]
#   tests/flake_hunt.sh --set named [--tests REGEX] [--pytest "IDS"] [--runs N] [--load ...] [...]
#   tests/flake_hunt.sh --table [--results FILE]
#
# --set gate (default): every test the README's test command (.ci/quickstart test) runs in its
#   plain build, two at a time as the gate runs them (ctest -j 2; RUN_SERIAL scripts alone):
#   the whole ctest suite but quarantine (scenarios, examples, harness, hosts, runtime, model,
#   reports, docs, bench, ...), then the Python package's whole pytest suite
#   (--venv) under each torch the gate runs it with (--venv, and build/torch2-env when it holds
#   the package), the torch groups' tests once more under build/torch2-env as if it lacked Python
#   backends (--set nopyb), and tests/wheel_check.sh in build/torch2-env (root). With --sanitizers, also the gate's ASan+UBSan build's ctest run (build/fuzz) and
#   its TSan build's (build/tsan), as the gate runs them, where those builds exist.
# --set timing: the timing-sensitive part only (what earlier hunts ran):
#   - ctest labels scenario, example and harness;
#   - the runtime's fault tests: the Catch2 cases tagged [fault], [failpoint], [lifecycle],
#     [lateness], [starvation], [telemetry] and [store] (each its own ctest, as in the gate);
#   - the Python package's scenario and fault tests (test_examples.py's pipeline scenario,
#     test_fault.py, test_exit.py), when --venv has the package.
# --set torch2: the Python tests of torch 2.x's features (issue 36) under build/torch2-env:
#   test_torch2.py (groups, functional collectives, FSDP2 on meshes of worlds), test_exit.py,
#   test_torch_ddp.py (DDP, a killed peer, the stalled-futures starvation case), test_telemetry.py
#   (a program's metrics and report_check), the FSDP2 and DDP examples and their scenarios,
#   bench_torch.py's fsdp part; test_exit.py and test_telemetry.py under --venv; and
#   tests/wheel_check.sh in build/torch2-env (root).
# --set nopyb: test_torch_pg.py, test_torch2.py and test_torch_ddp.py under build/torch2-env with
#   MW_TEST_TORCH_NO_PY_BACKEND=1 (groups that run their operations themselves, as under a torch
#   2.x whose c10d lets no Python class be a Backend), recorded as "pytest[torch2-nopyb] ...".
# --set named --tests REGEX: the ctest tests of the plain build whose names match REGEX (ctest -R),
#   two at a time: a new test's rate, measured before it joins the gate. --pytest "IDS" (pytest
#   node ids, relative to python/, space-separated) adds those Python tests, under
#   build/torch2-env and then under --venv, as the gate runs them; one of the two is enough.
# Loads: cpu = two busy loops (one per core of the CI machine) for the whole run; io = a writer
# that fills and fsyncs a 256 MiB file over and over; none = nothing added. The table counts the
# runs of one load (--load, cpu unless given); rows of other loads stay in the file, and a run
# whose load was not what it said (a build beside it) is relabelled there by hand (cpu+build).
# Every run appends one line per test to the results file (run, load, test, status, reruns,
# seconds, commit: the checkout's HEAD, with "+" when its tree differs from it). It is
# tests/flake_results.tsv unless --results names another: a file of the repository, committed
# after a hunt, so that runs accumulate across invocations, clones and sessions (build/, where it
# was kept before, is not in a clone: runs 1 to 29 were lost with it; docs/testing.md records
# them). Lines that start with "#" are comments; "# earlier runs: N" numbers the next run after N.
# The table printed at the end (and by --table alone) counts runs, failures and reruns per test
# over the whole file. Logs and JUnit files go to OUT (build/flake-hunt unless given). A rerun
# is what tests/run_scenario.sh did for an inconclusive verdict (mwchaos prints "RERUN ..."); it
# is counted, never hidden. A failing test is a bug to find: its output is kept in OUT/failures/,
# and a failed scenario's report folder (report.json, the HTML timeline) in
# OUT/failures/reports-runN/NAME-PID (MW_KEEP_FAILED_REPORTS, tests/run_scenario.sh).
# Exit: 0 no failure in this invocation, 1 a test failed, 2 usage.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=1 load=cpu build="$here/build/release" venv="$here/build/pyenv" out="$here/build/flake-hunt"
results="$here/tests/flake_results.tsv" table_only=0 set=gate sanitizers=0 tests="" pytests=""
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --load) load=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --venv) venv=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --set) set=$2; shift 2 ;;
    --sanitizers) sanitizers=1; shift ;;
    --table) table_only=1; shift ;;
    --tests) tests=$2; shift 2 ;;
    --pytest) pytests=$2; shift 2 ;;
    -h|--help) sed -n '2,47p' "$0"; exit 0 ;;
    *) echo "flake_hunt.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# Absolute: the Python tests run from python/ (a relative --venv named nothing there).
build=$(realpath -m -- "$build") venv=$(realpath -m -- "$venv") out=$(realpath -m -- "$out")
results=$(realpath -m -- "$results")
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "flake_hunt.sh: --runs wants a positive number, got '$runs'" >&2; exit 2; }
case $load in cpu|io|none) ;; *) echo "flake_hunt.sh: --load is cpu, io or none, got '$load'" >&2; exit 2 ;; esac
case $set in gate|timing|torch2|nopyb|named) ;; *) echo "flake_hunt.sh: --set is gate, timing, torch2, nopyb or named, got '$set'" >&2; exit 2 ;; esac
[ "$set" != named ] || [ -n "$tests$pytests" ] ||
  { echo "flake_hunt.sh: --set named needs --tests REGEX or --pytest IDS" >&2; exit 2; }
[ "$set" = named ] || [ -z "$tests$pytests" ] ||
  { echo "flake_hunt.sh: --tests and --pytest are for --set named" >&2; exit 2; }
mkdir -p "$out/failures" "$out/junit" "$(dirname "$results")"
[ -f "$results" ] || printf 'run\tload\ttest\tstatus\treruns\tseconds\tcommit\n' >"$results"

table() {
  python3 - "$results" "$load" <<'PY'
import collections, csv, sys
every = list(csv.DictReader((l for l in open(sys.argv[1]) if not l.startswith("#")),
                            delimiter="\t"))
rows = [r for r in every if r["load"] == sys.argv[2]]  # the load asked for; the others are kept
per = collections.OrderedDict()
loads = collections.Counter()
for r in rows:
    t = per.setdefault(r["test"], {"runs": 0, "failed": 0, "skipped": 0, "reruns": 0})
    t["runs"] += 1
    t["failed"] += r["status"] == "failed"
    t["skipped"] += r["status"] == "skipped"
    t["reruns"] += int(r["reruns"])
runs = sorted({(r["run"], r["load"]) for r in rows})
for _, l in runs:
    loads[l] += 1
others = sorted({(r["run"], r["load"]) for r in every if r["load"] != sys.argv[2]})
print(f"{len(runs)} runs ({', '.join(f'{n} beside {l}' for l, n in sorted(loads.items()))}), "
      f"{len(per)} tests, {sum(t['failed'] for t in per.values())} failures, "
      f"{sum(t['reruns'] for t in per.values())} reruns"
      + (f" (not counted: {len(others)} runs of other loads, "
         f"{', '.join(sorted({l for _, l in others}))}; --load names one)" if others else ""))
print(f"{'test':<78} {'runs':>5} {'failed':>6} {'skipped':>7} {'reruns':>6}")
for name, t in sorted(per.items(), key=lambda kv: (-kv[1]["failed"], -kv[1]["reruns"], kv[0])):
    print(f"{name[:78]:<78} {t['runs']:>5} {t['failed']:>6} {t['skipped']:>7} {t['reruns']:>6}")
PY
}
if ((table_only)); then table; exit 0; fi

[ -x "$build/bin/mwchaos" ] || { echo "flake_hunt.sh: no build at $build (run .ci/quickstart test first, or pass --build)" >&2; exit 2; }

hogs=()
stop_hogs() {
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done
  wait "${hogs[@]}" 2>/dev/null
  rm -f "$out/io-hog.bin"
  hogs=()
}
trap 'stop_hogs; exit 130' INT TERM
trap stop_hogs EXIT
start_hogs() {
  case $load in
    cpu) for _ in 1 2; do (while :; do :; done) & hogs+=($!); done ;;
    io) (while :; do dd if=/dev/zero of="$out/io-hog.bin" bs=1M count=256 conv=fsync status=none; done) &
        hogs+=($!) ;;
  esac
}

# The runtime's fault tests, by Catch2 tag, as ctest names them (one ctest per case).
fault_regex() {
  local bin names
  bin=$(find "$build/tests/runtime" -maxdepth 1 -name runtime_test -type f | head -n 1)
  [ -n "$bin" ] || return 0
  names=$("$bin" --list-test-names-only "[fault],[failpoint],[lifecycle],[lateness],[starvation],[telemetry],[store]" |
    grep -v '^$' | grep -v 'matching test case' | sed 's/[][\\.^$*+?(){}|]/\\&/g' | sed 's/^/^/; s/$/$/' | paste -sd'|')
  printf '%s' "$names"
}

# record RUN JUNIT-XML [PREFIX]: appends one line per test case of the JUnit file to results.tsv;
# a Python case is named "PREFIX CLASS::NAME" (PREFIX: pytest unless given).
record() {
  python3 - "$1" "$load" "$2" "$results" "$out/failures" "$commit" "${3:-pytest}" <<'PY'
import os, re, sys, xml.etree.ElementTree as ET
run, load, path, results, failures, commit, pytest = sys.argv[1:8]
if not os.path.exists(path):
    sys.exit(0)
root = ET.parse(path).getroot()
with open(results, "a") as f:
    for case in root.iter("testcase"):
        name = case.get("name")
        cls = case.get("classname") or ""
        if cls.startswith("tests.") or cls.startswith("test_"):
            name = f"{pytest} {cls}::{name}"
        out = "".join((e.text or "") for e in case.iter() if e.tag in ("system-out", "failure", "error"))
        status = "passed"
        if case.find("failure") is not None or case.find("error") is not None:
            status = "failed"
        elif case.find("skipped") is not None or case.get("status") in ("notrun", "disabled"):
            status = "skipped"
        reruns = len(re.findall(r"^RERUN ", out, re.M))
        f.write(f"{run}\t{load}\t{name}\t{status}\t{reruns}\t{float(case.get('time') or 0):.1f}\t{commit}\n")
        if status == "failed":
            safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:120]
            with open(os.path.join(failures, f"run{run}-{safe}.txt"), "w") as g:
                g.write(out)
PY
}

# pytest_run RUN TAG VENV TESTS...: the Python tests under VENV's python, recorded as TAG.
pytest_run() {
  local i=$1 tag=$2 env=$3
  shift 3
  [ -x "$env/bin/python" ] && "$env/bin/python" -c 'import multiworld_native' 2>/dev/null || return 0
  local rc=0
  (cd "$here/python" && MW_CHAOS="$build/bin/mwchaos" "$env/bin/python" -m pytest -q -p no:cacheprovider \
     -o junit_logging=system-out --junitxml "$out/junit/run$i-$tag.xml" "$@" \
     >"$out/run$i-$tag.log" 2>&1) || rc=1
  # A Python test is two tests of the gate, one per torch: "pytest" under --venv (torch 1.13),
  # "pytest[torch2]" under build/torch2-env; the torch groups' tests are a third,
  # "pytest[torch2-nopyb]", under torch 2.x as if it lacked Python backends (tag python-nopyb).
  local prefix=pytest
  [ "$env" != "$torch2" ] || prefix="pytest[torch2]"
  [ "$tag" != python-nopyb ] || prefix="pytest[torch2-nopyb]"
  record "$i" "$out/junit/run$i-$tag.xml" "$prefix"
  tail -n 1 "$out/run$i-$tag.log" 2>/dev/null | sed "s/^/   $tag: /"
  [ "$rc" = 0 ] || failed=1
  return "$rc"
}

# cmd_run RUN NAME CMD...: a command that is one test of the gate (exit 0: passed), recorded as
# NAME; its output is kept in failures/ when it fails.
cmd_run() {
  local i=$1 name=$2 rc=0 t0=$SECONDS status=passed
  shift 2
  "$@" >"$out/run$i-$name.log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    status=failed
    cp "$out/run$i-$name.log" "$out/failures/run$i-$name.txt"
    failed=1
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$i" "$load" "$name" "$status" \
    "$(grep -c '^RERUN ' "$out/run$i-$name.log")" "$((SECONDS - t0))" "$commit" >>"$results"
  echo "   $name: $status (exit $rc)"
  return "$rc"
}

# wheel_check_run RUN: tests/wheel_check.sh in the torch 2.x venv, where the gate runs it (root
# only, and only where that venv holds the package).
wheel_check_run() {
  [ "$(id -u)" = 0 ] && "$torch2/bin/python" -c 'import multiworld_native' 2>/dev/null || return 0
  cmd_run "$1" wheel_check "$here/tests/wheel_check.sh" "$torch2"
}

# ctest_run RUN TAG DIR ARGS...: ctest in DIR, recorded as TAG.
ctest_run() {
  local i=$1 tag=$2 dir=$3
  shift 3
  [ -d "$dir" ] || return 0
  local rc=0
  (cd "$dir" && ctest "$@" --output-junit "$out/junit/run$i-$tag.xml" >"$out/run$i-$tag.log" 2>&1) ||
    rc=1
  record "$i" "$out/junit/run$i-$tag.xml"
  grep -h "tests passed\|tests failed" "$out/run$i-$tag.log" 2>/dev/null | sed "s/^/   $tag: /"
  [ "$rc" = 0 ] || failed=1
  return "$rc"
}

regex=$(fault_regex)
failed=0
last=$(grep -v '^#' "$results" | tail -n +2 | cut -f1 | sort -n | tail -n 1)
earlier=$(sed -n 's/^# earlier runs: \([0-9]*\).*/\1/p' "$results" | head -n 1)
first=$((${last:-0} > ${earlier:-0} ? ${last:-0} + 1 : ${earlier:-0} + 1))
# The tree the runs test: HEAD, "+" when it differs from it (the hunt's own results file aside).
commit=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
own=$(realpath --relative-to="$here" "$results")
exclude=()
[[ $own == ../* ]] || exclude=(":!$own")
if [ "$commit" != unknown ] && [ -n "$(git -C "$here" status --porcelain -- . "${exclude[@]}")" ]; then
  commit+="+"
fi
torch2="$here/build/torch2-env"
# The torch groups' tests, which the gate runs a second time as under a torch 2.x without Python
# backends (MW_TEST_TORCH_NO_PY_BACKEND=1; .ci/quickstart's python_torch2).
nopyb_tests="tests/test_torch_pg.py tests/test_torch2.py tests/test_torch_ddp.py"
for ((i = first; i < first + runs; i++)); do
  start_hogs
  echo "== run $i ($load, $set) $(date +%T)"
  export MW_KEEP_FAILED_REPORTS="$out/failures/reports-run$i"
  if [ "$set" = gate ]; then
    # Two at a time, as the gate runs them (RUN_SERIAL scripts alone), beside the load.
    ctest_run "$i" plain "$build" -j 2 -LE '^quarantine$'
    pytest_run "$i" python "$venv" tests
    [ "$torch2" = "$venv" ] || pytest_run "$i" python-torch2 "$torch2" tests
    MW_TEST_TORCH_NO_PY_BACKEND=1 pytest_run "$i" python-nopyb "$torch2" $nopyb_tests
    wheel_check_run "$i"
    if ((sanitizers)); then
      (export MW_TEST_TIME_SCALE=3 ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$here/.ci/lsan.supp \
         UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
       ctest_run "$i" asan "$here/build/fuzz" -j 2 -L 'runtime|model|agent|reports|harness|fuzz' \
         -E '^harness[.]cli$') || failed=1
      (export MW_TEST_TIME_SCALE=3 \
         TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$here/.ci/tsan.supp"
       ctest_run "$i" tsan "$here/build/tsan" -j 2 -L runtime) || failed=1
    fi
  elif [ "$set" = torch2 ]; then
    pytest_run "$i" python-torch2 "$torch2" tests/test_torch2.py tests/test_exit.py \
      tests/test_torch_ddp.py tests/test_telemetry.py \
      tests/test_examples.py::test_fsdp_two_worlds_example \
      tests/test_examples.py::test_fsdp_two_worlds_scenario \
      tests/test_examples.py::test_ddp_two_worlds_example \
      tests/test_examples.py::test_ddp_two_worlds_scenario \
      tests/test_bench.py::test_bench_torch_runs_its_fsdp_part
    pytest_run "$i" python "$venv" tests/test_exit.py tests/test_telemetry.py
    wheel_check_run "$i"
  elif [ "$set" = nopyb ]; then
    MW_TEST_TORCH_NO_PY_BACKEND=1 pytest_run "$i" python-nopyb "$torch2" $nopyb_tests
  elif [ "$set" = named ]; then
    [ -z "$tests" ] || ctest_run "$i" named "$build" -j 2 -R "$tests"
    if [ -n "$pytests" ]; then
      read -ra ids <<<"$pytests"
      pytest_run "$i" python-torch2 "$torch2" "${ids[@]}"
      [ "$torch2" = "$venv" ] || pytest_run "$i" python "$venv" "${ids[@]}"
    fi
  else
    ctest_run "$i" labels "$build" -L 'scenario|example|harness'
    [ -z "$regex" ] || ctest_run "$i" runtime "$build" -R "$regex"
    pytest_run "$i" python "$venv" tests/test_examples.py::test_pipeline_serving_scenario \
      tests/test_fault.py tests/test_exit.py
  fi
  stop_hogs
done
table
exit $failed
