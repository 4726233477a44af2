"""Rank 1 of a two-member world that trains with DDP beside the test (test_torch_ddp.py).

    python ddp_worker.py WORLD PORT STEPS [HEARTBEAT_S]

Joins WORLD (rank 1 of 2, the store at 127.0.0.1:PORT), wraps the shared model in
DistributedDataParallel over the world's process group, and trains STEPS steps (0: until killed).
"""
import sys

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import multiworld_native as mw
from multiworld_native import torch as mwtorch


def model():
    """The same weights wherever it is called (a generator of its own: torch's global one is
    shared by the threads of a test)."""
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return net


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def train(ddp, opt, step, rank):
    x, y = batch(step, rank)
    opt.zero_grad()
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()


def main():
    world, port, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    heartbeat = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
    manager = mw.WorldManager()
    manager.initialize_world(world, 1, 2, port=port, timeout=30, heartbeat_timeout=heartbeat)
    net = model()
    ddp = DDP(net, process_group=mwtorch.process_group(manager, world))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    step = 0
    while steps == 0 or step < steps:
        train(ddp, opt, step, 1)
        step += 1
    manager.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
