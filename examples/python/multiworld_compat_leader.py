"""The original MultiWorld package's leader example on multiworld_native's compatibility module.

A leader (rank 0 of world1 and world2) receives tensors from one worker in each world, written
against the original API (asyncio, WorldManager.initialize_world as a coroutine,
communicator.recv(tensor, src, world_name), BrokenWorldException). The only change from a
MultiWorld program is the import line. The worker of world2 is SIGKILLed after 20 tensors; the
leader catches BrokenWorldException for world2 and keeps receiving from world1.

    python examples/python/multiworld_compat_leader.py     # exits 0 when world1 kept going
"""
import asyncio
import os
import signal
import subprocess
import sys

import torch

# The original: from multiworld.manager import WorldManager
#               from multiworld.communicator import BrokenWorldException
from multiworld_native.compat import BrokenWorldException, WorldManager


async def worker(world_name, port):
    world_manager = WorldManager()
    await world_manager.initialize_world(world_name, 1, 2, port=port)
    comm = world_manager.communicator
    tensor = torch.ones(1) * (1 if world_name == "world1" else 2)
    try:
        while True:
            await comm.send(tensor, 0, world_name)
    except BrokenWorldException:
        pass  # the leader left
    world_manager.cleanup()


async def leader():
    # The worlds' shared secret: the compat layer reads MW_STORE_TOKEN, which the workers inherit.
    os.environ.setdefault("MW_STORE_TOKEN", os.urandom(16).hex())
    world_manager = WorldManager()
    loop = asyncio.get_running_loop()
    workers = {}
    for world_name in ("world1", "world2"):
        # Rank 0 hosts the store; port -1 picks a free one, handed to the worker.
        joined = asyncio.create_task(world_manager.initialize_world(world_name, 0, 2, port=-1))
        await asyncio.sleep(0)  # initialize_world's first step creates the world
        port = await loop.run_in_executor(None, world_manager.store_port, world_name)
        workers[world_name] = subprocess.Popen(
            [sys.executable, __file__, "--worker", world_name, str(port)])
        await joined
    comm = world_manager.communicator
    received = {"world1": 0, "world2": 0}
    worlds = ["world1", "world2"]
    while received["world1"] < 200:
        for world_name in list(worlds):
            tensor = torch.zeros(1)
            try:
                await comm.recv(tensor, 1, world_name)
            except BrokenWorldException as e:
                print(f"caught an exception: {e} (cause {e.cause})")
                worlds.remove(world_name)
                continue
            received[world_name] += 1
            if world_name == "world2" and received["world2"] == 20:
                workers["world2"].send_signal(signal.SIGKILL)
    print(f"received {received['world1']} tensors in world1, {received['world2']} in world2; "
          f"world2 broken: {comm.is_broken('world2')}, world1 broken: {comm.is_broken('world1')}")
    ok = comm.is_broken("world2") and not comm.is_broken("world1")
    world_manager.remove_world("world1")  # the worker of world1 sees the leader leave
    for p in workers.values():
        p.wait(timeout=30)
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        asyncio.run(worker(sys.argv[2], int(sys.argv[3])))
    else:
        sys.exit(asyncio.run(leader()))
