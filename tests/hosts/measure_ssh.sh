#!/usr/bin/env bash
# Latency of a command to a simulated ssh host: on a held pipe vs a new ssh each time.
#
#   measure_ssh.sh DIR [HOST] [ROUNDS] [SPAWNS]
#
# DIR is an 'ssh_hosts.sh up' directory. Prints one line per method:
#   local-pipe   a 'cat' child on this machine (the floor: pipes + scheduling)
#   held-ssh     one 'ssh HOST cat' kept open; ROUNDS lines written and read back
#   held-ssh-burst2  two lines written back to back, then both read (Nagle check)
#   oneway-ssh       host -> controller delay of a line (shared CLOCK_MONOTONIC)
#   new-ssh      SPAWNS runs of 'ssh HOST true' (connect, key exchange, auth, exit)
#   new-ssh-noshell  the same but no remote shell (sftp subsystem, internal to sshd)
#   local-bashrc     'bash -c ". ~/.bashrc"' here: what the remote shell adds
#   mux-ssh      SPAWNS runs of 'ssh HOST true' over a ControlMaster connection
set -euo pipefail
dir=${1:?usage: measure_ssh.sh DIR [HOST] [ROUNDS] [SPAWNS]}
host=${2:-h1}; rounds=${3:-1000}; spawns=${4:-50}
cfg=$dir/ssh_config
[[ -f $cfg ]] || { echo "no $cfg: run ssh_hosts.sh up first" >&2; exit 1; }
command -v python3 >/dev/null || { echo "needs python3" >&2; exit 1; }

python3 - "$cfg" "$host" "$rounds" "$spawns" <<'EOF'
import os, subprocess, sys, time, tempfile
cfg, host, rounds, spawns = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]

def report(name, xs):
    ms = [x / 1e6 for x in xs]
    print(f"{name:16s} n={len(ms):5d}  p50={pct(ms,.5):8.3f} ms  p99={pct(ms,.99):8.3f} ms"
          f"  min={min(ms):8.3f} ms  max={max(ms):8.3f} ms", flush=True)

def readline(r):
    buf = b""
    while not buf.endswith(b"\n"):
        got = os.read(r, 4096)
        if not got: sys.exit("the pipe closed (ssh failed?)")
        buf += got
    return buf

def pipe_rtt(argv, n):
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    w, r = p.stdin.fileno(), p.stdout.fileno()
    # warm-up round trip (covers connection setup for ssh)
    os.write(w, b"warm\n"); readline(r)
    out = []
    for i in range(n):
        line = b"x%08d\n" % i
        t0 = time.perf_counter_ns()
        os.write(w, line); buf = readline(r)
        out.append(time.perf_counter_ns() - t0)
        assert buf == line, (buf, line)
    p.stdin.close(); p.wait()
    return out

report("local-pipe", pipe_rtt(["cat"], rounds))
report("held-ssh", pipe_rtt(["ssh", "-F", cfg, host, "cat"], rounds))

# Two commands written back to back (two writes, two TCP segments) before
# either reply is read: would show a Nagle/delayed-ACK stall (~40 ms) if ssh
# left Nagle on for a session without a tty.
p = subprocess.Popen(["ssh", "-F", cfg, host, "cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
w, r = p.stdin.fileno(), p.stdout.fileno()
os.write(w, b"warm\n"); readline(r)
out = []
for i in range(rounds // 2):
    t0 = time.perf_counter_ns()
    os.write(w, b"a\n"); os.write(w, b"b\n")
    got = readline(r)
    if got == b"a\n": got += readline(r)
    assert got == b"a\nb\n", got
    out.append(time.perf_counter_ns() - t0)
p.stdin.close(); p.wait()
report("held-ssh-burst2", out)

# One way, host -> controller: every simulated host shares this machine's
# CLOCK_MONOTONIC (no time namespace), so a line stamped on the host and read
# here gives the one-way delay directly. A line every 2 ms.
emit = "import os,sys,time\nfor i in range(%d):\n os.write(1, b'%%d\\n' %% time.monotonic_ns()); time.sleep(0.002)\n" % (rounds // 2)
with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
    f.write(emit)
try:
    p = subprocess.Popen(["ssh", "-F", cfg, host, "python3", f.name], stdout=subprocess.PIPE, bufsize=0)
    d, buf = [], b""
    while True:
        got = os.read(p.stdout.fileno(), 65536)
        if not got: break
        now = time.monotonic_ns(); buf += got
        *lines, buf = buf.split(b"\n")
        d += [now - int(l) for l in lines if l]
    p.wait()
finally:
    os.unlink(f.name)
report("oneway-ssh", d[10:])

def spawn(argv, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
        out.append(time.perf_counter_ns() - t0)
    return out

report("new-ssh", spawn(["ssh", "-F", cfg, host, "true"], spawns))
# The same connection without the remote login shell: the sftp subsystem is
# internal to sshd, so root's ~/.bashrc (which bash reads for ssh commands)
# is not run; it exits at once on EOF.
report("new-ssh-noshell", spawn(["ssh", "-F", cfg, "-s", host, "sftp"], spawns))
t = []
for _ in range(spawns):
    t0 = time.perf_counter_ns()
    subprocess.run(["bash", "-c", ". ~/.bashrc >/dev/null 2>&1; true"], check=True)
    t.append(time.perf_counter_ns() - t0)
report("local-bashrc", t)

with tempfile.TemporaryDirectory() as td:
    cp = os.path.join(td, "cm")
    base = ["ssh", "-F", cfg, "-o", "ControlPath=" + cp]
    subprocess.run(base + ["-o", "ControlMaster=yes", "-o", "ControlPersist=60", "-f", "-N", host], check=True)
    try:
        report("mux-ssh", spawn(base + ["-o", "ControlMaster=no", host, "true"], spawns))
    finally:
        subprocess.run(base + ["-O", "exit", host], stderr=subprocess.DEVNULL)
EOF
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)  cpus: $(nproc)"
