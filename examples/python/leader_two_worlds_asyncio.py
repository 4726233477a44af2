"""leader_two_worlds.py with asyncio: one task per world receives from that world's worker; the
worker of w2 is killed.

Each receive is an `irecv` whose Work is awaited (`await work`: a thread of the loop's default
executor waits with the GIL released; the event loop never polls). The task of w2 ends with
BrokenWorldError while the task of w1 goes on receiving. Run it with the package installed
(docs/python.md):

    python examples/python/leader_two_worlds_asyncio.py

It starts its two workers itself (leader_two_worlds.py's worker) and exits 0 when w1 kept
streaming after w2 broke.
"""
import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import time

import torch

import multiworld_native as mw

WORKER = pathlib.Path(__file__).with_name("leader_two_worlds.py")


async def receive(comm, world, counts, state):
    """Receives from `world`'s worker until its world breaks or the run ends."""
    t = torch.zeros(1024)
    while not state["done"]:
        try:
            await comm.irecv(world, t, 1)
        except mw.BrokenWorldError as e:
            state["broken_at"] = time.monotonic()
            print(f"leader: world {e.world} broke ({e.cause}, rank {e.rank}); the task of w1 "
                  "goes on")
            return
        counts[world] += 1
        if world == "w1" and state["broken_at"] is not None:
            counts["w1_after_break"] += 1


async def kill_after(procs, counts, n):
    while counts["w2"] < n:
        await asyncio.sleep(0.01)
    procs["w2"].send_signal(signal.SIGKILL)
    print("leader: killed the worker of w2")


async def leader():
    token = os.urandom(16).hex()  # the worlds' shared secret, given to the workers
    env = dict(os.environ, MW_EXAMPLE_TOKEN=token)
    m = mw.WorldManager()
    procs, joins = {}, []
    for world in ("w1", "w2"):
        joins.append(m.initialize_world(world, rank=0, size=2, port=0, token=token,
                                        heartbeat_timeout=0.5, async_op=True))
        port = m.store_port(world, timeout=10)
        procs[world] = subprocess.Popen(
            [sys.executable, str(WORKER), "--worker", world, str(port)], env=env)
    for work in joins:
        await work  # both worlds join concurrently
    comm = mw.Communicator(m)
    counts = {"w1": 0, "w2": 0, "w1_after_break": 0}
    state = {"done": False, "broken_at": None}
    tasks = [asyncio.create_task(receive(comm, w, counts, state)) for w in ("w1", "w2")]
    killer = asyncio.create_task(kill_after(procs, counts, 50))
    await asyncio.sleep(3.0)
    state["done"] = True
    await asyncio.gather(*tasks, killer)
    print(f"leader: received {counts['w1']} tensors in w1 ({counts['w1_after_break']} after w2 "
          f"broke), {counts['w2']} in w2")
    m.close()  # leaves both worlds: the worker of w1 sees its world end and exits
    for p in procs.values():
        p.wait(timeout=10)
    return 0 if state["broken_at"] is not None and counts["w1_after_break"] > 0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(leader()))
