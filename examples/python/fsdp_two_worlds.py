"""FSDP2 on two worlds in one process: one world's peer dies, the other world's FSDP trains on.

The main process trains two models with FSDP2 (``fully_shard``), one over world `a` and one over
world `b`, each on a thread of its own and each sharded with a peer process (rank 1 of its
world). There is no default group: each world's DeviceMesh comes from
``multiworld_native.torch.device_mesh``. When b's peer dies, b's next step fails with the
BrokenWorldError's text and only b's: a trains on. The main process then re-joins b, rebuilds
b's model, and trains it with a restarted peer. Needs torch 2.x (FSDP2).

    python fsdp_two_worlds.py              the whole story on this machine: starts both peers,
                                           kills b's, starts it again
    python fsdp_two_worlds.py ROLE --world NAME ADDR PORT HEARTBEAT_MS OP_TIMEOUT_MS [...]
                                           one role, as the chaos scenario fsdp_two_worlds.lua
                                           runs them: main (rank 0 of every world given) or
                                           peer (rank 1 of the one world given)

The main role reports `steps` (steps of the first world given, `a` in the scenario) and
`steps_<world>` for each world with multiworld_native.report_metric, which the harness judges;
elsewhere that call does nothing. SIGTERM or Ctrl-C ends any role cleanly (exit 0).
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import torch

import multiworld_native as mw
from multiworld_native import torch as mwtorch

FEATURES = 32
BATCH = 16


def model():
    """The same weights in every process and thread (a generator of our own)."""
    net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, FEATURES))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return net


def join(manager, world, rank, stop, until=None):
    """Joins (or re-joins) `world` until it works, `stop` is set or time.monotonic() passes
    `until`; True once joined. A try that timed out is followed by a longer one (2 s, then 4, 8
    and 10 s): on a loaded machine a join can take more than 2 s, and tries that always time out
    would never join. A join in progress when `stop` is set is cancelled within 50 ms: the stop
    may come just after the world broke (its other member stopped first), and a join that waited
    for its own deadline would hold the process past the harness's 5 s."""
    name, addr, port, heartbeat_ms, op_timeout_ms = world
    attempt = 2
    while not stop.is_set() and (until is None or time.monotonic() < until):
        try:
            manager.remove_world(name)  # a broken generation, or a failed join, if any
        except mw.MultiworldError:
            pass
        joining = manager.initialize_world(name, rank, 2, addr=addr, port=port, timeout=attempt,
                                           token=os.environ.get("MW_CHAOS_STORE_TOKEN"),
                                           heartbeat_timeout=heartbeat_ms / 1000,
                                           op_timeout=op_timeout_ms / 1000, async_op=True)
        while not joining.is_completed() and not stop.wait(0.05):
            pass
        if not joining.is_completed():  # stopped: cancel the join
            try:
                manager.remove_world(name)
            except mw.MultiworldError:  # the manager's close() came first
                pass
            return False
        try:
            joining.wait()
            return True
        except TimeoutError:
            attempt = min(2 * attempt, 10)
        except mw.MultiworldError:
            time.sleep(0.05)
    return False


def before_joining_to_train():
    """What FSDP2 loads on its first use, loaded before this process joins a world and before it
    answers SIGTERM with a flag: torch.distributed.fsdp (610 modules) and the torch._dynamo that
    the first fully_shard imports take 2.1 s on a quiet two-core machine and over 5 s beside two
    busy loops. Loaded after the join, they held a restarted peer's peers up, and a SIGTERM that
    came meanwhile waited for them (past the harness's 5 s); loaded here, SIGTERM still ends the
    process at once (its default action: nothing is joined or held yet)."""
    from torch.distributed.fsdp import fully_shard  # noqa: F401
    import torch._dynamo  # noqa: F401


def train(manager, name, rank, stop, on_step):
    """Trains a model sharded with FSDP2 over world `name` until `stop`; an error of the world
    (BrokenWorldError's text in a RuntimeError) propagates."""
    from torch.distributed.fsdp import fully_shard  # loaded already: before_joining_to_train

    pg = mwtorch.process_group(manager, name)
    try:
        mesh = mwtorch.device_mesh(pg, "cpu")
        net = model()
        fully_shard(net[0], mesh=mesh)
        fully_shard(net, mesh=mesh)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(rank)
        while not stop.is_set():
            x = torch.randn(BATCH, FEATURES, generator=gen)
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), x).backward()  # an autoencoder
            opt.step()
            on_step()
    finally:
        pg.close()


def broken_text(e):
    """The BrokenWorldError's text in `e`: the error itself (a dist.* call of FSDP raised it), or
    the line of a RuntimeError of torch's C++ that carries it (an autograd hook's failure); None
    when `e` is another error."""
    if isinstance(e, mw.BrokenWorldError):
        return f"BrokenWorldError: {e}"
    return next((line.strip() for line in str(e).splitlines() if "BrokenWorldError" in line),
                None)


class Seen:
    """What one world's training thread saw: steps in all, generations joined, breaks."""

    def __init__(self):
        self.steps = 0
        self.ups = 0
        self.breaks = []


def run_world(manager, world, rank, stop, seen, metrics=()):
    """Trains over `world` (rank `rank`) until `stop`, re-joining it after each break."""
    torch.set_num_threads(1)  # per thread under torch 2.x (docs/python.md, "Training in threads")
    def on_step():
        seen.steps += 1
        for m in metrics:
            mw.report_metric(m)

    while not stop.is_set():
        if not join(manager, world, rank, stop):
            return
        seen.ups += 1
        print(f"rank {rank}: {world[0]} is up", flush=True)
        try:
            train(manager, world[0], rank, stop, on_step)
        except RuntimeError as e:  # the world broke: say so, re-join
            if stop.is_set():
                return
            seen.breaks.append(e)
            print(f"rank {rank}: {world[0]} broke: {broken_text(e)}", flush=True)


def main_role(worlds, stop):
    """Rank 0 of every world in `worlds` (a list): one training thread each."""
    torch.set_num_threads(1)
    manager = mw.WorldManager()
    seen = {w[0]: Seen() for w in worlds}
    threads = [threading.Thread(target=run_world,
                                args=(manager, w, 0, stop, seen[w[0]],
                                      (("steps",) if i == 0 else ()) + (f"steps_{w[0]}",)),
                                daemon=True)
               for i, w in enumerate(worlds)]
    for t in threads:
        t.start()
    return wind_up(manager, threads, stop)


def peer_role(world, stop):
    torch.set_num_threads(1)
    manager = mw.WorldManager()
    thread = threading.Thread(target=run_world, args=(manager, world, 1, stop, Seen()),
                              daemon=True)
    thread.start()
    return wind_up(manager, [thread], stop)


def wind_up(manager, threads, stop):
    """Once `stop` is set: removes every world first, so that a step in flight (a first FSDP2
    step takes seconds on a busy machine) ends at its next collective instead of running to its
    end, then joins the training threads."""
    while not stop.is_set():
        stop.wait(0.2)
    manager.close()
    for t in threads:
        t.join(30)
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def story():
    """The whole example on this machine, without the harness."""
    here = os.path.abspath(__file__)
    worlds = {n: (n, "127.0.0.1", free_port(), 1000, 10000) for n in ("a", "b")}

    def start(name):
        w = worlds[name]
        return subprocess.Popen([sys.executable, here, "peer", "--world", w[0], w[1], str(w[2]),
                                 str(w[3]), str(w[4])])

    torch.set_num_threads(1)
    stop = threading.Event()
    manager = mw.WorldManager()
    seen = {n: Seen() for n in worlds}
    peers = {n: start(n) for n in worlds}
    threads = [threading.Thread(target=run_world, args=(manager, worlds[n], 0, stop, seen[n]))
               for n in worlds]
    for t in threads:
        t.start()

    def until(cond, seconds):
        deadline = time.monotonic() + seconds
        while not cond() and time.monotonic() < deadline:
            time.sleep(0.05)
        return cond()

    ok = until(lambda: seen["a"].steps >= 20 and seen["b"].steps >= 20, 60)
    print("main: killing b's peer", flush=True)
    peers["b"].kill()
    peers["b"].wait()
    ok = ok and until(lambda: seen["b"].breaks, 10)
    a_at_break = seen["a"].steps
    ok = ok and until(lambda: seen["a"].steps >= a_at_break + 20, 30)
    b_before = seen["b"].steps
    peers["b"] = start("b")
    ok = ok and until(lambda: seen["b"].ups >= 2 and seen["b"].steps >= b_before + 20, 60)
    stop.set()
    for t in threads:
        t.join(30)
    for p in peers.values():
        p.send_signal(signal.SIGTERM)
        p.wait(30)
    manager.close()
    if not ok or seen["a"].breaks or not all(broken_text(e) for e in seen["b"].breaks):
        print(f"main: not as it should be: a broke {len(seen['a'].breaks)} times, b "
              f"{len(seen['b'].breaks)}; steps a {seen['a'].steps}, b {seen['b'].steps}")
        return 1
    print(f"main: b broke alone ({broken_text(seen['b'].breaks[0])[:80]}...); a trained "
          f"{seen['a'].steps} steps with no error; b was re-joined and trained "
          f"{seen['b'].steps - b_before} steps with the restarted peer")
    return 0


def main(argv):
    if not argv:
        return story()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("role", choices=("main", "peer"))
    p.add_argument("--world", nargs=5, action="append", required=True,
                   metavar=("NAME", "ADDR", "PORT", "HEARTBEAT_MS", "OP_TIMEOUT_MS"),
                   help="a world: its name, its store's address and port, its heartbeat "
                        "timeout and its operation deadline in milliseconds")
    a = p.parse_args(argv)
    worlds = [(n, addr, int(port), int(hb), int(op)) for n, addr, port, hb, op in a.world]
    if a.role == "peer" and len(worlds) != 1:
        p.error("role peer is in one world")
    before_joining_to_train()
    stop = threading.Event()

    def on_signal(signum, frame):
        # Only a flag, never an exception: every blocking call here is bounded (a join's 2 s, a
        # peer that leaves breaks the world's pending operations), and an exception raised
        # where the main thread waits would skip the joins and the manager's close (the
        # training threads would hold it past the interpreter's exit), or, raised in the middle
        # of a backward, be kept by torch's autograd engine with every frame under it.
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if a.role == "main":
        return main_role(worlds, stop)
    return peer_role(worlds[0], stop)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
