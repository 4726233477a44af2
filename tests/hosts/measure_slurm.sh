#!/usr/bin/env bash
# Latency of a command to a simulated Slurm node: on a held srun pipe vs a new
# srun step each time.
#
#   measure_slurm.sh DIR [NODE] [ROUNDS] [SPAWNS]
#
# DIR is a 'slurm_hosts.sh up' directory. Takes an allocation of all nodes
# (salloc --no-shell), measures, and cancels it. Prints:
#   held-srun     one 'srun --overlap -N1 -n1 -u -w NODE cat' kept open;
#                 ROUNDS lines written and read back
#   new-srun      SPAWNS runs of 'srun --overlap -N1 -n1 -w NODE true' in the allocation
#   new-job-srun  SPAWNS runs of 'srun -N1 -n1 -w NODE true' (a new job each)
set -euo pipefail
dir=${1:?usage: measure_slurm.sh DIR [NODE] [ROUNDS] [SPAWNS]}
node=${2:-h1}; rounds=${3:-1000}; spawns=${4:-20}
[[ -f $dir/slurm.env ]] || { echo "no $dir/slurm.env: run slurm_hosts.sh up first" >&2; exit 1; }
# shellcheck disable=SC1091
source "$dir/slurm.env"
job=$(salloc -N "$MWH_SLURM_N" --no-shell 2>&1 | grep -o 'allocation [0-9]*' | grep -o '[0-9]*$')
[[ -n $job ]] || { echo "salloc failed" >&2; exit 1; }
trap 'scancel "$job" 2>/dev/null || true' EXIT
python3 - "$job" "$node" "$rounds" "$spawns" <<'EOF'
import os, subprocess, sys, time
job, node, rounds, spawns = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def pct(xs, q):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]
def report(name, xs):
    ms = [x / 1e6 for x in xs]
    print(f"{name:14s} n={len(ms):5d}  p50={pct(ms,.5):8.3f} ms  p99={pct(ms,.99):8.3f} ms"
          f"  min={min(ms):8.3f} ms  max={max(ms):8.3f} ms", flush=True)
def readline(r):
    buf = b""
    while not buf.endswith(b"\n"):
        got = os.read(r, 4096)
        if not got: sys.exit("the pipe closed (srun failed?)")
        buf += got
    return buf
step = ["srun", "--jobid", job, "--overlap", "-N1", "-n1", "-u", "-w", node]
p = subprocess.Popen(step + ["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
w, r = p.stdin.fileno(), p.stdout.fileno()
t0 = time.perf_counter_ns(); os.write(w, b"warm\n"); readline(r)
print(f"first line through a new srun pipe: {(time.perf_counter_ns()-t0)/1e6:.1f} ms")
out = []
for i in range(rounds):
    line = b"x%08d\n" % i
    t0 = time.perf_counter_ns(); os.write(w, line); got = readline(r)
    out.append(time.perf_counter_ns() - t0); assert got == line
p.stdin.close(); p.wait()
report("held-srun", out)
def spawn(argv, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
        out.append(time.perf_counter_ns() - t0)
    return out
report("new-srun", spawn(step + ["true"], spawns))
report("new-job-srun", spawn(["srun", "-N1", "-n1", "-w", node, "true"], spawns))
EOF
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)  cpus: $(nproc)"
