"""One of two processes that train a model with FSDP2 (``fully_shard``) over a DeviceMesh
(test_torch2.py).

    python fsdp_worker.py RANK INIT_FILE MODE OUT_JSON

MODE: ``gloo`` (the baseline: init_process_group("gloo"), init_device_mesh), ``register``
(init_process_group("multiworld") after register(), init_device_mesh: the mesh's group is a
world), or ``from_group`` (a gloo default group, a world joined beside it, and
DeviceMesh.from_group over the world's process_group), or ``mesh`` (no default group: a world
joined through a port file, and multiworld_native.torch.device_mesh over its group). Trains 10 steps from the same weights and
data in every mode, then writes every full parameter (as lists) to OUT_JSON.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard

import multiworld_native as mw
from multiworld_native import torch as mwtorch

STEPS = 10


def model():
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return net


def train(mesh, rank):
    net = model()
    fully_shard(net[0], mesh=mesh)
    fully_shard(net, mesh=mesh)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * step + rank)
        loss = net(torch.randn(4, 8, generator=g)).pow(2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return [p.full_tensor().flatten().tolist() for p in net.parameters()]


def main():
    rank, init, mode, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    torch.set_num_threads(1)
    manager = None
    if mode == "mesh":
        pass
    elif mode == "register":
        mwtorch.register(heartbeat_timeout=2.0)
        dist.init_process_group("multiworld", init_method=f"file://{init}", rank=rank,
                                world_size=2)
        mesh = init_device_mesh("cpu", (2,))
        assert dist.get_backend(mesh.get_group()) == "multiworld"
    else:
        dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2)
        if mode == "gloo":
            mesh = init_device_mesh("cpu", (2,))
        else:
            manager = mw.WorldManager()
            port = [0]
            if rank == 0:  # hosts the world's store: its port goes to rank 1 over gloo
                join = manager.initialize_world("fsdp", 0, 2, port=0, timeout=30, async_op=True)
                port = [manager.store_port("fsdp", 10)]
            dist.broadcast_object_list(port, src=0)
            if rank == 0:
                assert join.wait(30)
            else:
                manager.initialize_world("fsdp", 1, 2, port=port[0], timeout=30)
            pg = mwtorch.process_group(manager, "fsdp")
            mesh = DeviceMesh.from_group(pg, "cpu")
            assert mesh.get_group() is pg
    if mode == "mesh":  # no default group at all: mwtorch.device_mesh
        manager = mw.WorldManager()
        port_file = init + ".port"
        if rank == 0:
            join = manager.initialize_world("fsdp", 0, 2, port=0, timeout=30, async_op=True)
            with open(port_file + ".tmp", "w") as f:
                f.write(str(manager.store_port("fsdp", 10)))
            os.rename(port_file + ".tmp", port_file)
            assert join.wait(30)
        else:
            while not os.path.exists(port_file):
                time.sleep(0.01)
            with open(port_file) as f:
                manager.initialize_world("fsdp", 1, 2, port=int(f.read()), timeout=30)
        pg = mwtorch.process_group(manager, "fsdp")
        mesh = mwtorch.device_mesh(pg, "cpu")
        assert not dist.is_initialized() and mesh.get_group() is pg
    params = train(mesh, rank)
    with open(out, "w") as f:
        json.dump(params, f)
    if dist.is_initialized():
        dist.destroy_process_group()
    if manager is not None:
        manager.close()
    print(f"ok {rank}", flush=True)
    return 0


if __name__ == "__main__":
    rc = main()
    # Ends without the interpreter's teardown: once in a fresh-clone run the gloo baseline (no
    # world, no group of this package) printed "ok 0" and then aborted in torch 2.15's own
    # teardown ("terminate called without an active exception"; not seen again in 22 runs, 12 of
    # them beside two busy loops). What this worker is for is done and written by then; how a
    # program using worlds exits is test_exit.py's subject.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
