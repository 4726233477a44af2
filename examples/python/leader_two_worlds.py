"""A leader in two worlds receives tensors from one worker in each; the worker of w2 is killed.

Only w2 breaks: the leader sees BrokenWorldError for w2 (cause, blamed rank, detection time) and
goes on receiving from w1. Run it with the package installed (docs/python.md):

    python examples/python/leader_two_worlds.py

It starts its two workers itself (this same file with --worker) and exits 0 when w1 kept
streaming after w2 broke.
"""
import os
import signal
import subprocess
import sys
import time

import torch

import multiworld_native as mw


def worker(world, port):
    token = os.environ["MW_EXAMPLE_TOKEN"]  # from the environment, never the command line
    m = mw.WorldManager()
    m.initialize_world(world, rank=1, size=2, port=port, token=token, heartbeat_timeout=0.5)
    comm = mw.Communicator(m)
    t = torch.full((1024,), 1.0)
    while True:  # until killed, or until the leader leaves
        try:
            comm.send(world, t, 0)
        except mw.MultiworldError:
            return


def leader():
    token = os.urandom(16).hex()  # the worlds' shared secret, given to the workers
    env = dict(os.environ, MW_EXAMPLE_TOKEN=token)
    m = mw.WorldManager()
    ports, procs = {}, {}
    for world in ("w1", "w2"):
        # Rank 0 hosts the world's store; port 0 picks a free port, passed on to the worker.
        work = m.initialize_world(world, rank=0, size=2, port=0, token=token,
                                  heartbeat_timeout=0.5, async_op=True)
        ports[world] = m.store_port(world, timeout=10)
        procs[world] = subprocess.Popen(
            [sys.executable, __file__, "--worker", world, str(ports[world])], env=env)
        work.wait(timeout=30)
    comm = mw.Communicator(m)
    t = torch.zeros(1024)
    received = {"w1": 0, "w2": 0}
    broken_at = None
    w1_after_break = 0
    start = time.monotonic()
    while time.monotonic() - start < 3.0:
        for world in ("w1", "w2"):
            if world == "w2" and broken_at is not None:
                continue
            try:
                comm.recv(world, t, 1)
                received[world] += 1
                if world == "w1" and broken_at is not None:
                    w1_after_break += 1
            except mw.BrokenWorldError as e:
                broken_at = time.monotonic()
                print(f"leader: world {e.world} broke ({e.cause}, rank {e.rank}); "
                      f"w1 goes on")
        if received["w2"] == 50 and procs["w2"].poll() is None:
            procs["w2"].send_signal(signal.SIGKILL)
            print("leader: killed the worker of w2")
    print(f"leader: received {received['w1']} tensors in w1 ({w1_after_break} after w2 broke), "
          f"{received['w2']} in w2")
    m.close()  # leaves both worlds: the worker of w1 sees its world end and exits
    for p in procs.values():
        p.wait(timeout=10)
    return 0 if broken_at is not None and w1_after_break > 0 else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(leader())
