"""The torch 2.x adapter: the private structures of torch 2.x's ``torch.distributed`` that
``multiworld_native.torch`` touches, and nothing else touches them (docs/python.md, "torch
versions"). In 2.x a ``ProcessGroup`` dispatches each operation to the ``Backend`` registered for
the tensors' device type; a world's group is a ``ProcessGroup`` holding one Python ``Backend``
(for "cpu" and "cuda") whose methods run the operations, and it is entered in torch's group maps
and its C++ registry of group names like the groups torch makes, so that ``get_backend``,
``get_group_rank``/``get_global_rank``, ``destroy_process_group``, DeviceMesh and the functional
collectives (which find a group by name) all see it.

Private: ``_world`` (``pg_map``, ``pg_names``, ``pg_group_ranks``, ``pg_backend_config``,
``tags_to_pg``, ``pg_to_tag``); ``ProcessGroup._register_backend``, ``_set_default_backend``,
``_set_group_name``, ``_set_group_desc``; ``_register_process_group`` /
``_unregister_process_group``; ``DistributedDataParallel._active_ddp_module``.
tests/test_torch2.py checks each against what torch reads."""

import os

import torch
import torch.distributed as dist

GENERATION = 2
_C = torch._C._distributed_c10d
_DEVICES = ("cpu", "cuda")

# Backend properties that c10d's trampoline would look up in Python and, finding the C++ property
# itself, re-enter forever (RecursionError): a Python backend defines each one it does not serve.
UNSUPPORTED_FEATURES = tuple(
    f for f in ("supports_coalescing", "supports_splitting", "supports_shrinking",
                "supports_reconfigure", "supports_window", "supports_abort_hooks",
                "supports_completion_hooks", "supports_time_estimate")
    if hasattr(_C.Backend, f))


def python_backend():
    """Whether this torch lets a Python class be a c10d ``Backend`` (its binding has a
    constructor: 2.15's has, 2.11's has not). Without one a world's group runs its operations
    itself, as a 1.x group does (``multiworld_native.torch``). ``MW_TEST_TORCH_NO_PY_BACKEND=1``
    (a test hook: the gate runs the group's tests so under torch 2.15) answers False."""
    if os.environ.get("MW_TEST_TORCH_NO_PY_BACKEND") == "1":
        return False

    class _Probe(_C.Backend):
        pass

    try:
        _Probe(0, 1)
    except TypeError:  # pybind11: "_Probe: No constructor defined!"
        return False
    return True


def rank_map():
    """torch's {group: {global rank: group rank}}."""
    return dist.distributed_c10d._world.pg_group_ranks


def _tag(name):
    return f"ptd:{name}"


_NEEDED = ("_register_process_group", "_unregister_process_group", "_resolve_process_group")


def _registered(name):
    """Whether torch's registry of group names holds `name` (2.11 has no
    ``_is_process_group_registered``: its ``_resolve_process_group`` raises for a name it lacks)."""
    if hasattr(_C, "_is_process_group_registered"):
        return _C._is_process_group_registered(name)
    try:
        _C._resolve_process_group(name)
    except RuntimeError:
        return False
    return True


def add_group(pg, backend, name, global_ranks):
    """Makes `pg` a group like torch's own: `backend` serves its cpu and cuda tensors (None: `pg`
    runs its operations itself), its name is `name` (unique in the process: RuntimeError
    otherwise), world rank i is global rank ``global_ranks[i]``. RuntimeError naming the torch
    when it lacks what this needs."""
    missing = [f for f in _NEEDED if not hasattr(_C, f)]
    if missing or not hasattr(dist.distributed_c10d, "_world"):
        raise RuntimeError(f"torch {torch.__version__}: its torch.distributed lacks "
                           f"{', '.join(missing) or '_world'}, which the torch 2.x adapter of "
                           "multiworld_native uses (tested with 2.15: docs/python.md)")
    if _registered(name):
        raise RuntimeError(f"a process group named '{name}' exists already in this process")
    if backend is not None:  # else the group runs its operations itself
        for d in _DEVICES:
            pg._register_backend(torch.device(d), _C.ProcessGroup.BackendType.CUSTOM, backend)
        pg._set_default_backend(_C.ProcessGroup.BackendType.CUSTOM)
    # After _register_backend: the name is kept by the backends.
    pg._set_group_name(name)
    pg._set_group_desc(name)
    w = dist.distributed_c10d._world
    w.pg_map[pg] = ("multiworld", None)
    w.pg_names[pg] = name
    w.pg_backend_config[pg] = ",".join(f"{d}:multiworld" for d in _DEVICES)
    w.pg_group_ranks[pg] = {g: r for r, g in enumerate(global_ranks)}
    w.tags_to_pg.setdefault(_tag(name), []).append(pg)
    w.tags_to_pg.setdefault("", []).append(pg)
    w.pg_to_tag[pg] = _tag(name)
    _C._register_process_group(name, pg)


def forget(pg):
    """Undoes add_group (or what destroy_process_group left of it); idempotent."""
    w = dist.distributed_c10d._world
    name = w.pg_names.pop(pg, None)
    for m in (w.pg_map, w.pg_backend_config, w.pg_group_ranks):
        m.pop(pg, None)
    tag = w.pg_to_tag.pop(pg, None)
    for t in (tag, ""):
        groups = w.tags_to_pg.get(t)
        if groups is not None and pg in groups:
            groups.remove(pg)
            if not groups and t:
                del w.tags_to_pg[t]
    if name is not None and _registered(name):
        _C._unregister_process_group(name)


def register_backend(name, creator):
    """Registers backend `name` for cpu and cuda: ``creator(store, rank, size, timeout)`` returns
    the Backend, or the ProcessGroup that runs the operations itself."""
    dist.Backend.register_backend(name, creator, devices=list(_DEVICES))


def gloo_group(store, rank, size, timeout):
    """A c10d Gloo group made without init_process_group (in 2.x, ``ProcessGroupGloo`` is a
    Backend: it is put in a ProcessGroup of its own, as init_process_group would): the baseline
    the tests and benchmarks compare a world with."""
    backend = _C.ProcessGroupGloo(store, rank, size, timeout)
    pg = _C.ProcessGroup(store, rank, size)
    pg._register_backend(torch.device("cpu"), _C.ProcessGroup.BackendType.GLOO, backend)
    pg._set_default_backend(_C.ProcessGroup.BackendType.GLOO)
    return pg


def device_mesh(pg, device_type):
    """A one-dimensional DeviceMesh over group `pg`, made without a default group (what
    ``DeviceMesh.from_group`` does, but with this member's global rank given, where from_group
    asks the default group for it). Private: DeviceMesh's ``_init_backend`` and ``_rank``
    arguments, its ``_dim_group_names`` and ``_pg_registry``."""
    from torch.distributed.device_mesh import DeviceMesh

    ranks = dist.get_process_group_ranks(pg)
    mesh = DeviceMesh(device_type, torch.tensor(ranks, dtype=torch.int), _init_backend=False,
                      _rank=ranks[pg.rank()])
    mesh._dim_group_names = [pg.group_name]
    mesh._pg_registry[pg.group_name] = pg
    return mesh


def forget_active_ddp():
    """Lets go of the DDP module torch 2.x keeps in the class attribute
    ``DistributedDataParallel._active_ddp_module`` (for TorchDynamo), saved and restored around
    each forward (``_inside_ddp_forward``) without a lock. Two threads' forwards that overlap can
    leave one of the modules there after both ended (A saves None, B saves A's, A restores None,
    B restores A's), and with it that DDP's process group, its world's manager, the manager's
    watchdog thread and its eventfd, until the next DDP forward anywhere in the process
    (docs/python.md). Returns whether a module was there. Only for a process whose DDP forwards
    have all ended: the attribute is read by a forward in flight."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    if getattr(DDP, "_active_ddp_module", None) is None:
        return False
    DDP._active_ddp_module = None
    return True
