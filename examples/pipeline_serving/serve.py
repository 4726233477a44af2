"""A small model-serving pipeline on multiworld_native: a front end streams requests (torch CPU
tensors) through stage replicas, each replica in a world of its own with the front end.

    python serve.py frontend --world s1 ADDR PORT HEARTBEAT_MS OP_TIMEOUT_MS --world s2 ...
    python serve.py stage --world s1 ADDR PORT HEARTBEAT_MS OP_TIMEOUT_MS

Each stage replica runs a small model (a linear layer and a ReLU); the front end sends every
request to the next replica whose world is healthy and checks the answer. A replica that dies
breaks its world only: the front end goes on through the others and re-creates the broken world
in the background under the same name, so that a restarted replica joins it again. SIGTERM or
Ctrl-C ends either cleanly (exit 0).

Nothing here knows about the chaos harness: run under `mwchaos` (pipeline_serving.lua), the
runtime reports the worlds by itself, and `mw.report_metric("requests")` (a no-op elsewhere)
gives the harness the front end's own throughput. The store token comes from
MW_CHAOS_STORE_TOKEN when set (the harness sets it).
"""
import argparse
import os
import signal
import sys
import threading
import time

import torch

import multiworld_native as mw

FEATURES = 256
BATCH = 16


def model():
    torch.manual_seed(0)  # every replica holds the same weights
    layer = torch.nn.Linear(FEATURES, FEATURES)
    layer.requires_grad_(False)
    return lambda x: torch.relu(layer(x))


def join(manager, world, rank, stop):
    """Joins (or re-joins) `world` until it works or `stop` is set; True once joined."""
    name, addr, port, heartbeat_ms, op_timeout_ms = world
    token = os.environ.get("MW_CHAOS_STORE_TOKEN")
    while not stop.is_set():
        try:
            manager.remove_world(name)  # a broken generation, if any
        except mw.MultiworldError:
            pass
        try:
            manager.initialize_world(name, rank, 2, addr=addr, port=port, timeout=2, token=token,
                                     heartbeat_timeout=heartbeat_ms / 1000,
                                     op_timeout=op_timeout_ms / 1000)
            return True
        except (mw.MultiworldError, TimeoutError):
            time.sleep(0.05)
    return False


def frontend(worlds, stop):
    manager = mw.WorldManager()
    comm = mw.Communicator(manager)
    expected = model()
    joined = {w[0]: threading.Event() for w in worlds}
    joiners = {}

    def rejoin(world):
        name = world[0]
        if name in joiners:
            joiners[name].join()
        joined[name].clear()

        def body():
            if join(manager, world, 0, stop):
                joined[name].set()
        joiners[name] = threading.Thread(target=body, daemon=True)
        joiners[name].start()

    for w in worlds:
        rejoin(w)
    request = torch.empty(BATCH, FEATURES)
    answer = torch.empty(BATCH, FEATURES)
    served, turn = 0, 0
    while not stop.is_set():
        ready = [w for w in worlds if joined[w[0]].is_set()]
        if not ready:
            time.sleep(0.005)
            continue
        world = ready[turn % len(ready)]
        turn += 1
        torch.manual_seed(served)
        request.copy_(torch.randn(BATCH, FEATURES))
        try:
            comm.send(world[0], request, 1)
            comm.recv(world[0], answer, 1)
        except (mw.BrokenWorldError, mw.MultiworldError, TimeoutError) as e:
            if stop.is_set():
                break
            print(f"serve.py: {world[0]} failed ({e}); re-creating it", file=sys.stderr)
            rejoin(world)
            continue
        # The program's own check of each answer, for the harness's expect.app_checks (a no-op
        # outside a harness; a wrong answer is also said on stderr).
        want = expected(request)
        right = torch.allclose(answer, want)
        detail = ""
        if not right:
            worst = (answer - want).abs().max().item()
            detail = f"from {world[0]}: off by up to {worst:.3g}"
            print(f"serve.py: wrong answer {detail}", file=sys.stderr)
        mw.report_check("answer", right, detail)
        served += 1
        mw.report_metric("requests")
    manager.close()  # ends the joins in progress too
    for t in joiners.values():  # which let go of the manager before the interpreter exits
        t.join(5)
    print(f"serve.py: the front end served {served} requests", file=sys.stderr)
    return 0


def stage(world, stop):
    manager = mw.WorldManager()
    comm = mw.Communicator(manager)
    run = model()
    buf = torch.empty(BATCH, FEATURES)
    while not stop.is_set():
        if not join(manager, world, 1, stop):
            break
        while not stop.is_set():  # serve this generation until it breaks
            try:
                comm.recv(world[0], buf, 0)
                buf.copy_(run(buf))
                comm.send(world[0], buf, 0)
            except (mw.BrokenWorldError, mw.MultiworldError, TimeoutError):
                break
    manager.close()
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("role", choices=("frontend", "stage"))
    p.add_argument("--world", nargs=5, action="append",
                   metavar=("NAME", "ADDR", "PORT", "HEARTBEAT_MS", "OP_TIMEOUT_MS"), required=True,
                   help="a world: its name, its store's address and port, its heartbeat timeout "
                        "and its operation deadline in milliseconds")
    a = p.parse_args(argv)
    worlds = [(n, addr, int(port), int(hb), int(op)) for n, addr, port, hb, op in a.world]
    if a.role == "stage" and len(worlds) != 1:
        p.error("a stage replica is in one world")
    # One intra-op thread: these tensors are small, and under torch 2.x the idle threads of a
    # bigger OpenMP team spin between calls, taking the CPU a restarted replica needs to import
    # torch (it never re-joined within 7 s beside two busy loops).
    torch.set_num_threads(1)
    stop = threading.Event()

    def on_signal(signum, frame):
        # Only a flag, never an exception: every blocking call here is bounded (a join's 2 s, a
        # peer that leaves breaks the world's pending operations), and an exception would skip
        # the manager's close, leaving a joining thread to hold it past the interpreter's exit.
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return frontend(worlds, stop) if a.role == "frontend" else stage(worlds[0], stop)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
