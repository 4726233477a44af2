"""One of three processes that run torch.distributed on backend "multiworld" (test_torch_ddp.py).

    python torch_backend_worker.py RANK INIT_FILE

init_process_group(backend="multiworld") through a file store, then the default group's
collectives, dist.get_rank/get_world_size, a new_group of global ranks 1 and 2 with rooted calls
in global ranks, gather and scatter, and DDP on the subgroup. Prints "ok RANK <checksum>".
"""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from multiworld_native import torch as mwtorch

import ddp_worker


def main():
    rank, init_file = int(sys.argv[1]), sys.argv[2]
    mwtorch.register(heartbeat_timeout=2.0)
    dist.init_process_group("multiworld", init_method=f"file://{init_file}", rank=rank,
                            world_size=3)
    assert dist.get_backend() == "multiworld", dist.get_backend()
    assert (dist.get_rank(), dist.get_world_size()) == (rank, 3)
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), 6.0)), t

    got = [torch.zeros(2) for _ in range(3)] if rank == 1 else None
    dist.gather(torch.full((2,), float(rank)), gather_list=got, dst=1)
    if rank == 1:
        assert [g[0].item() for g in got] == [0.0, 1.0, 2.0], got
    out = torch.zeros(2)
    dist.scatter(out, [torch.full((2,), 10.0 + r) for r in range(3)] if rank == 2 else None,
                 src=2)
    assert torch.equal(out, torch.full((2,), 10.0 + rank)), out

    sub = dist.new_group([1, 2], backend="multiworld")
    checksum = 0.0
    if rank in (1, 2):
        assert (dist.get_rank(sub), dist.get_world_size(sub)) == (rank - 1, 2)
        b = torch.full((2,), float(rank))
        dist.broadcast(b, src=2, group=sub)  # src is a global rank
        assert torch.equal(b, torch.full((2,), 2.0)), b
        net = ddp_worker.model()
        ddp = DDP(net, process_group=sub)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        for step in range(3):
            ddp_worker.train(ddp, opt, step, rank)
        checksum = sum(p.sum().item() for p in net.parameters())
    dist.barrier()
    dist.destroy_process_group()
    print(f"ok {rank} {checksum!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
