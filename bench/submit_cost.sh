#!/usr/bin/env bash
# What one operation of an nccl world costs the runtime, counted, not timed (issue 39;
# docs/benchmarks.md, "Submission, counted"). mw_submit_cost (bench/submit_cost.cc) runs on the
# simulated GPU (tests/runtime/sim_cuda.cc) under callgrind, at two counts of operations, A and B,
# in two modes: `runtime`, all_reduces of 4 floats on a one-rank nccl world, each submitted and
# waited for stream-ordered; `raw`, the same on a one-rank NCCL communicator ordered as c10d's
# NCCL groups order an operation and its wait (the baseline). Each count is the difference
# between the two runs divided by B - A (set-up, warm-up and exit cancel out), over every thread
# of the process:
#   - instructions (Ir) per operation, in all and by where they ran: the program (which links
#     libmultiworld statically: the runtime, or the baseline's loop), the simulated GPU's
#     library (what a real CUDA and NCCL replace), libc, libstdc++, the rest (libfiu, ld.so);
#   - calls per operation to malloc, pthread_mutex_lock, pthread_cond_broadcast (notify_all),
#     clock_gettime, fiu_fail (a libfiu lookup) and __tls_get_addr;
#   - the program's own count of C++ allocations per operation (operator new, every thread).
# The last column, runtime - raw, is what the runtime adds to a stream-ordered NCCL call; on a
# real GPU the CUDA and NCCL calls cost what their libraries cost, not what the simulated ones do.
# Usage: bench/submit_cost.sh [BUILD_DIR] [A B]   (default: build/release 500 4500)
set -euo pipefail
case ${1:-} in -h | --help)
  sed -n '2,/^# Usage/p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
  ;;
esac
build=${1:-build/release}
a=${2:-500}
b=${3:-4500}
prog=$build/bench/mw_submit_cost
sim=$build/tests/runtime/libmw_sim_cuda.so
[ -x "$prog" ] || { echo "submit_cost: no $prog (build it first; it needs NCCL's headers)" >&2; exit 2; }
[ -f "$sim" ] || { echo "submit_cost: no $sim (the simulated GPU; build the tests)" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "submit_cost: valgrind is not installed" >&2; exit 2; }
[[ $a =~ ^[0-9]+$ && $b =~ ^[0-9]+$ ]] && ((a >= 1 && b > a)) ||
  { echo "submit_cost: want 1 <= A < B, got '$a' '$b'" >&2; exit 2; }
sim=$(realpath "$sim")
# The table's rows, "key|label", in order: ir_<part> (instructions by where they ran; ir_all,
# their sum), calls_<function> (each counted in run()), cxx_allocations (the program's count).
rows='ir_all|instructions
ir_program|  in the program (runtime or loop)
ir_simulated_gpu|  in the simulated GPU
ir_libc|  in libc
ir_libstdcxx|  in libstdc++
ir_other|  elsewhere (libfiu, ld.so)
calls_malloc|malloc calls
cxx_allocations|C++ allocations (operator new)
calls_pthread_mutex_lock|mutex locks
calls_pthread_cond_broadcast|condition variable broadcasts
calls_clock_gettime|clock reads
calls_fiu_fail|libfiu lookups
calls___tls_get_addr|thread-local lookups (__tls_get_addr)'
functions=$(sed -n 's/^calls_\([^|]*\)|.*/\1/p' <<<"$rows" | tr '\n' ' ')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run MODE OPS: one run under callgrind; prints "key value" lines: ir_<part> and
# calls_<function> (the whole run), allocations_per_op (the program's own count).
run() {
  local out=$work/cg.$1.$2
  MW_CUDART_LIBRARY=$sim MW_NCCL_LIBRARY=$sim MW_SIM_DEVICES=1 \
    valgrind --tool=callgrind --callgrind-out-file="$out" "$prog" "$1" "$2" >"$out.stdout" \
    2>"$out.log" || { cat "$out.log" "$out.stdout" >&2; exit 3; }
  cat "$out.stdout"
  # Self cost per object (ob=), and the number of calls to a few functions (cfn= then calls=).
  # Names are compressed: "(id) name" the first time, "(id)" after; fn= and cfn= share ids,
  # ob= and cob= share theirs. A versioned name (pthread_mutex_lock@@GLIBC_2.2.5) counts as its
  # base name.
  awk -v prog="$(realpath "$prog")" -v sim="$sim" -v functions="$functions" '
    function name(s, table,   id) {
      if (match(s, /^\([0-9]+\)/)) {
        id = substr(s, 1, RLENGTH)
        if (length(s) > RLENGTH) table[id] = substr(s, RLENGTH + 2)
        return table[id]
      }
      return s
    }
    function part(o) {
      if (o == prog) return "program"
      if (o == sim) return "simulated_gpu"
      if (o ~ /\/libc\.so/) return "libc"
      if (o ~ /\/libstdc\+\+\.so/) return "libstdcxx"
      return "other"
    }
    /^ob=/ { ob = part(name(substr($0, 4), obs)); next }
    /^cob=/ { name(substr($0, 5), obs); next }
    /^fn=/ { name(substr($0, 4), fns); next }
    /^cfn=/ { callee = name(substr($0, 5), fns); sub(/@.*/, "", callee); next }
    /^calls=/ { split(substr($0, 7), c, " "); calls[callee] += c[1]; skip = 1; next }
    /^[-+*0-9]/ {
      if (skip) { skip = 0; next }  # the inclusive cost of the call just named
      ir[ob] += $2
    }
    END {
      for (p in ir) print "ir_" p, ir[p]
      n = split(functions, f, " ")
      for (i = 1; i <= n; i++) print "calls_" f[i], calls[f[i]] + 0
    }' "$out"
}

for mode in raw runtime; do
  run "$mode" "$a" | sort >"$work/$mode.a"
  run "$mode" "$b" | sort >"$work/$mode.b"
  # key per-op, the difference over B - A; allocations_per_op as the B run counted it.
  join "$work/$mode.a" "$work/$mode.b" | awk -v ops=$((b - a)) '
    $1 == "allocations_per_op" { print "cxx_allocations", $3; next }
    { print $1, ($3 - $2) / ops }' | sort >"$work/$mode"
done
echo "mw_submit_cost on the simulated GPU: per operation ($a and $b operations apart), every thread"
join "$work/raw" "$work/runtime" | awk -v rows="$rows" '
  BEGIN {
    n = split(rows, lines, "\n")
    for (i = 1; i <= n; i++) {
      split(lines[i], kv, "|")
      order[i] = kv[1]
      label[kv[1]] = kv[2]
    }
  }
  { raw[$1] = $2; rt[$1] = $3; if ($1 ~ /^ir_/) { raw["ir_all"] += $2; rt["ir_all"] += $3 } }
  END {
    printf "%-40s %10s %10s %10s\n", "", "raw", "runtime", "added"
    for (i = 1; i <= n; i++) {
      k = order[i]
      fmt = k ~ /^ir_/ ? "%-40s %10.0f %10.0f %10.0f\n" : "%-40s %10.2f %10.2f %10.2f\n"
      printf fmt, label[k], raw[k], rt[k], rt[k] - raw[k]
    }
  }'
