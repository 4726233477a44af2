"""DDP training and serving in one process, on two worlds that fail alone.

The main process trains a small model with DistributedDataParallel over world `train` (with a
`trainer` peer process) and, on another thread, answers requests of a `client` process over
world `serve`. When the client dies, `serve` breaks alone: DDP goes on training with no error,
and the main process re-creates `serve`, which a restarted client joins.

    python ddp_two_worlds.py              the whole story on this machine: starts the trainer
                                          and the client, kills the client, starts it again
    python ddp_two_worlds.py ROLE --world NAME ADDR PORT HEARTBEAT_MS OP_TIMEOUT_MS [...]
                                          one role (main, trainer or client), as the chaos
                                          scenario ddp_two_worlds.lua runs them

The main role reports `steps` (training steps) and `requests` (answered requests) with
multiworld_native.report_metric, which the harness judges; elsewhere that call does nothing.
SIGTERM or Ctrl-C ends any role cleanly (exit 0).
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
from torch.nn.parallel import DistributedDataParallel as DDP

import multiworld_native as mw
from multiworld_native import torch as mwtorch

FEATURES = 64
BATCH = 32


def model():
    """The same weights in every process and thread: drawn from a generator of our own (torch's
    global one is shared by the training and serving threads)."""
    net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 128), torch.nn.ReLU(),
                              torch.nn.Linear(128, FEATURES))
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
    """What DDP loads on its first use, loaded before this process joins a world: torch 2.x's DDP
    imports torch._dynamo when it is first built (1.7 s on a quiet two-core machine, over 5 s
    beside two busy loops), and a member that joined but cannot step yet holds its peers up."""
    try:
        import torch._dynamo  # noqa: F401
    except ImportError:  # torch 1.x has none
        pass


def train(manager, world, rank, stop):
    """Trains with DDP over `world` until `stop`; returns the number of steps."""
    # One intra-op thread per training or serving thread: these tensors are small, and torch
    # 2.x gives each new thread an OpenMP team of its own that spins between calls
    # (docs/python.md, "Training in threads").
    torch.set_num_threads(1)
    net = model()
    ddp = DDP(net, process_group=mwtorch.process_group(manager, world))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    steps = 0
    while not stop.is_set():
        x = torch.randn(BATCH, FEATURES, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), x).backward()  # an autoencoder: any data will do
        opt.step()
        steps += 1
        mw.report_metric("steps")
    return steps


class Served:
    """What the serving thread saw: generations of the world joined, breaks, requests answered
    in the current generation."""

    def __init__(self):
        self.ups = 0
        self.breaks = []
        self.requests = 0


def serve(manager, world, stop, seen):
    """Answers the client's requests over `world`, re-creating it after each break."""
    torch.set_num_threads(1)
    comm = mw.Communicator(manager)
    net = model()
    request = torch.empty(BATCH, FEATURES)
    while not stop.is_set():
        if not join(manager, world, 0, stop):
            return
        seen.ups += 1
        seen.requests = 0
        print(f"main: {world[0]} is up", flush=True)
        while not stop.is_set():
            try:
                comm.recv(world[0], request, 1)
                with torch.no_grad():
                    answer = net(request)
                comm.send(world[0], answer, 1)
            except (mw.BrokenWorldError, mw.MultiworldError, TimeoutError) as e:
                if stop.is_set():
                    return
                seen.breaks.append(e)
                print(f"main: {world[0]} broke ({getattr(e, 'cause', e)}); re-creating it",
                      flush=True)
                break
            seen.requests += 1
            mw.report_metric("requests")


def client(world, stop):
    """Sends requests to the main process over `world` and checks the answers."""
    torch.set_num_threads(1)
    manager = mw.WorldManager()
    comm = mw.Communicator(manager)
    net = model()
    request = torch.empty(BATCH, FEATURES)
    answer = torch.empty(BATCH, FEATURES)
    gen = torch.Generator().manual_seed(7)
    while not stop.is_set():
        if not join(manager, world, 1, stop):
            break
        while not stop.is_set():
            request.copy_(torch.randn(BATCH, FEATURES, generator=gen))
            try:
                comm.send(world[0], request, 0)
                comm.recv(world[0], answer, 0)
            except (mw.BrokenWorldError, mw.MultiworldError, TimeoutError):
                break
            # The program's own check of each answer, for the harness's expect.app_checks (a no-op
            # outside a harness; a wrong answer is also said on stderr).
            with torch.no_grad():
                want = net(request)
            right = torch.allclose(answer, want, atol=1e-5)
            detail = ""
            if not right:
                detail = f"off by up to {(answer - want).abs().max().item():.3g}"
                print(f"client: a wrong answer, {detail}", file=sys.stderr)
            mw.report_check("answer", right, detail)
    manager.close()
    return 0


def main_role(train_world, serve_world, stop):
    before_joining_to_train()
    manager = mw.WorldManager()
    server = threading.Thread(target=serve, args=(manager, serve_world, stop, Served()),
                              daemon=True)
    try:
        if not join(manager, train_world, 0, stop):
            return 0
        server.start()
        try:
            steps = train(manager, train_world[0], 0, stop)
        except RuntimeError as e:  # the train world broke: say so, fail
            if stop.is_set():
                return 0
            print(f"main: training failed: {e}", file=sys.stderr)
            return 1
        print(f"main: trained {steps} steps", flush=True)
        return 0
    finally:
        # However the role ends (SIGTERM included): closing the manager ends the serving
        # thread's receive, and the thread lets go of its objects before the interpreter exits.
        stop.set()
        manager.close()
        if server.is_alive():
            server.join(10)


def trainer_role(world, stop):
    before_joining_to_train()
    manager = mw.WorldManager()
    if not join(manager, world, 1, stop):
        return 0
    try:
        train(manager, world[0], 1, stop)
    except RuntimeError:
        pass  # the main process ended first
    manager.close()
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def story():
    """The whole example on this machine, without the harness."""
    here = os.path.abspath(__file__)
    worlds = {name: (name, "127.0.0.1", free_port(), 500, 10000) for name in ("train", "serve")}

    def start(role, name):
        w = worlds[name]
        return subprocess.Popen([sys.executable, here, role, "--world", w[0], w[1], str(w[2]),
                                 str(w[3]), str(w[4])])

    stop = threading.Event()
    manager = mw.WorldManager()
    trainer = start("trainer", "train")
    first = start("client", "serve")
    if not join(manager, worlds["train"], 0, stop, until=time.monotonic() + 60):
        print("main: the trainer did not join world train in 60 s")
        for p in (trainer, first):
            p.kill()
            p.wait()
        manager.close()
        return 1
    seen = Served()
    server = threading.Thread(target=serve, args=(manager, worlds["serve"], stop, seen),
                              daemon=True)
    server.start()
    steps, failure = [0], []

    def training():
        try:
            steps[0] = train(manager, "train", 0, stop)
        except RuntimeError as e:
            failure.append(e)

    training_thread = threading.Thread(target=training)
    training_thread.start()

    def until(cond, seconds):
        deadline = time.monotonic() + seconds
        while not cond() and not failure and time.monotonic() < deadline:
            time.sleep(0.05)
        return cond()

    ok = until(lambda: seen.requests >= 20, 30)
    print("main: killing the client", flush=True)
    first.kill()
    first.wait()
    ok = ok and until(lambda: seen.breaks, 10)
    second = start("client", "serve")
    ok = ok and until(lambda: seen.ups >= 2 and seen.requests >= 20, 30)
    stop.set()
    training_thread.join(30)
    for p in (second, trainer):
        p.send_signal(signal.SIGTERM)
        p.wait(30)
    manager.close()  # ends the serving thread's receive
    server.join(10)
    if failure:
        print(f"main: training failed: {failure[0]}")
        return 1
    if not ok:
        print("main: serve did not break and come back as it should")
        return 1
    e = seen.breaks[0]
    print(f"main: serve broke alone ({e.cause}, rank {e.rank}); DDP trained {steps[0]} steps "
          f"with no error; serve was re-created and answered {seen.requests} requests of the "
          "restarted client")
    return 0


def main(argv):
    if not argv:
        return story()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("role", choices=("main", "trainer", "client"))
    p.add_argument("--world", nargs=5, action="append", required=True,
                   metavar=("NAME", "ADDR", "PORT", "HEARTBEAT_MS", "OP_TIMEOUT_MS"),
                   help="a world: its name, its store's address and port, its heartbeat "
                        "timeout and its operation deadline in milliseconds")
    a = p.parse_args(argv)
    worlds = {n: (n, addr, int(port), int(hb), int(op)) for n, addr, port, hb, op in a.world}
    want = {"main": {"train", "serve"}, "trainer": {"train"}, "client": {"serve"}}[a.role]
    if set(worlds) != want:
        p.error(f"role {a.role} is in worlds {', '.join(sorted(want))}")
    stop = threading.Event()

    def on_signal(signum, frame):
        # Only a flag, never an exception: every blocking call here is bounded (a join's 2 s, a
        # peer that leaves breaks the world's pending operations), and an exception raised in
        # the middle of DDP's backward is kept by torch's autograd engine with every frame
        # under it, the world manager included, past the interpreter's exit.
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if a.role == "main":
        return main_role(worlds["train"], worlds["serve"], stop)
    if a.role == "trainer":
        return trainer_role(worlds["train"], stop)
    return client(worlds["serve"], stop)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
