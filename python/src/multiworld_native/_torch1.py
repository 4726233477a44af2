"""The torch 1.x adapter: the private structures of torch 1.13's ``torch.distributed`` that
``multiworld_native.torch`` touches, and nothing else touches them (docs/python.md, "torch
versions"). In 1.x a ``ProcessGroup`` is itself the backend: a world's group is a Python subclass
of it whose methods run the operations.

Private: ``distributed_c10d._pg_group_ranks`` (the map from a group to {global rank: group
rank} that ``dist.*`` reads for ``src=``/``dst=``, ``get_rank(group)`` and
``get_process_group_ranks``). tests/test_torch_pg.py checks it is the map torch reads."""

import torch.distributed as dist

GENERATION = 1


def rank_map():
    """torch's {group: {global rank: group rank}}; RuntimeError naming the torch when absent."""
    ranks = getattr(dist.distributed_c10d, "_pg_group_ranks", None)
    if not isinstance(ranks, dict):
        import torch
        raise RuntimeError(f"torch {torch.__version__}: no _pg_group_ranks in "
                           "torch.distributed.distributed_c10d (the torch 1.x adapter)")
    return ranks


def add_group(pg, backend, name, global_ranks):
    """Makes `pg` (the backend itself in 1.x: `backend` is None) known to ``dist.*``: its
    world rank i is global rank ``global_ranks[i]``. 1.x groups have no names (`name` unused)."""
    del backend, name
    rank_map()[pg] = {g: r for r, g in enumerate(global_ranks)}


def forget(pg):
    """Undoes add_group; idempotent."""
    rank_map().pop(pg, None)


def register_backend(name, creator):
    """Registers backend `name`: ``creator(store, rank, size, timeout)`` returns the group."""
    dist.Backend.register_backend(name, creator)


def gloo_group(store, rank, size, timeout):
    """A c10d Gloo group made without init_process_group (in 1.x, ``ProcessGroupGloo`` is one):
    the baseline the tests and benchmarks compare a world with."""
    return dist.ProcessGroupGloo(store, rank, size, timeout)


def device_mesh(pg, device_type):
    """torch 1.x has no DeviceMesh."""
    import torch
    raise RuntimeError(f"torch {torch.__version__} has no DeviceMesh (torch 2.x has)")


def forget_active_ddp():
    """torch 1.x's DDP keeps no module in a class attribute: nothing to let go of (the torch 2.x
    adapter's forget_active_ddp). Returns False."""
    return False
