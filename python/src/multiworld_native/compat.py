"""The original MultiWorld package's API over multiworld_native: a MultiWorld program changes one
import line.

    # before: from multiworld.manager import WorldManager
    #         from multiworld.communicator import BrokenWorldException
    from multiworld_native.compat import WorldManager, BrokenWorldException

What it keeps: ``WorldManager`` with the coroutine ``initialize_world(world_name, rank,
world_size, backend="gloo", addr="127.0.0.1", port=-1, timeout=30, device=cpu)``,
``remove_world``, ``communicator`` and ``cleanup()``; ``WorldCommunicator`` with the coroutines
``send(tensor, dst, world_name)``, ``recv(tensor, src, world_name)``, ``broadcast``,
``all_reduce(tensor, op, world_name)``, ``reduce``, ``all_gather(tensors, tensor, world_name)``,
``gather(tensor, gather_list, dst, world_name)`` and ``scatter(tensor, scatter_list, src,
world_name)``, and ``is_broken(world_name)``; ``BrokenWorldException``.

What differs, and why:

* No patched PyTorch, no TCPStore, no watchdog task and no busy-polling loop: the native runtime
  detects failures, and each coroutine awaits its operation in the event loop's default executor
  (one waiting thread per pending operation, the GIL released).
* ``port``: rank 0 hosts the world's store there (as the original's TCPStore did); ``-1`` or
  ``0`` lets rank 0 pick a free port (``manager.store_port(name)`` gives it, for the others).
* ``token`` (an added keyword, default: the ``MW_STORE_TOKEN`` environment variable): the world's
  shared secret, which every member must present to its store. Without one, any local process can
  reach the store (docs/store-protocol.md, "Without a token"); give one on any shared machine.
* A broken world raises ``BrokenWorldException`` (also a :class:`BrokenWorldError`, with the
  native fields ``world``, ``cause``, ``rank``, ``detected_at``), the world is removed, and its
  name is free for ``initialize_world`` again (the original could not reuse a name).
* ``cleanup()`` leaves every world (so peers see a member that left, not one that died), flushes
  stdout and ends the process with ``os._exit(0)`` as the original does.
"""

import asyncio
import os
import sys

from . import _core
from .errors import BrokenWorldError

__all__ = ["BrokenWorldException", "WorldCommunicator", "WorldManager"]


class BrokenWorldException(BrokenWorldError):
    """A world broke (the original's exception; also a :class:`BrokenWorldError`)."""

    def __init__(self, world_name, msg, cause="none", rank=-1, detected_at=0.0, detail=""):
        super().__init__(msg, world_name, cause, rank, detected_at, detail or msg)
        self._world_name = world_name
        self._msg = msg

    def __str__(self):
        return f"{self._world_name} broken: {self._msg}"

    def __reduce__(self):
        return (type(self), (self._world_name, self._msg, self.cause, self.rank,
                             self.detected_at, self.detail))


def _op_name(op):
    """``torch.distributed.ReduceOp.SUM`` (PRODUCT, MIN, MAX), or ``"sum"``, as the native name."""
    if isinstance(op, str):
        return op.lower()
    import torch.distributed as dist

    for name, native in (("SUM", "sum"), ("PRODUCT", "prod"), ("MIN", "min"), ("MAX", "max")):
        if op == getattr(dist.ReduceOp, name):
            return native
    raise ValueError(f"reduce op {op!r} is not supported (SUM, PRODUCT, MIN, MAX)")


class WorldCommunicator:
    """Operations on the manager's worlds, as coroutines; a broken world raises
    :class:`BrokenWorldException` and is removed."""

    def __init__(self, world_manager):
        self._manager = world_manager
        self._comm = _core.Communicator(world_manager._native)
        self._broken = {}

    def add_world(self, world_name, backend="gloo"):
        """Called by WorldManager, as in the original."""
        self._broken[world_name] = False

    def remove_world(self, world_name):
        """Called by WorldManager, as in the original."""
        self._broken[world_name] = True

    def is_broken(self, world_name):
        """True when the world broke, was removed or is unknown."""
        return self._broken.get(world_name, True)

    async def _run(self, world_name, submit):
        try:
            work = submit()
            await work
        except BrokenWorldError as e:
            # Raise first: the caller hears of the break as soon as the runtime knows of it; the
            # broken world is removed right after, off the caller's path.
            self._broken[world_name] = True
            self._manager._drop_soon(world_name)
            raise BrokenWorldException(world_name, e.detail or str(e), e.cause, e.rank,
                                       e.detected_at, e.detail) from e

    async def send(self, tensor, dst, world_name):
        await self._run(world_name, lambda: self._comm.isend(world_name, tensor, dst))

    async def recv(self, tensor, src, world_name):
        await self._run(world_name, lambda: self._comm.irecv(world_name, tensor, src))

    async def broadcast(self, tensor, src, world_name):
        await self._run(world_name,
                        lambda: self._comm.broadcast(world_name, tensor, src, async_op=True))

    async def all_reduce(self, tensor, op="sum", world_name=None):
        await self._run(world_name, lambda: self._comm.all_reduce(
            world_name, tensor, op=_op_name(op), async_op=True))

    async def reduce(self, tensor, dst, op="sum", world_name=None):
        await self._run(world_name, lambda: self._comm.reduce(
            world_name, tensor, dst, op=_op_name(op), async_op=True))

    async def all_gather(self, tensors, tensor, world_name):
        """``tensors``: one tensor per rank, each shaped like ``tensor``."""
        import torch

        flat = torch.empty((len(tensors),) + tuple(tensor.shape), dtype=tensor.dtype,
                           device=tensor.device)
        await self._run(world_name, lambda: self._comm.all_gather(
            world_name, flat, tensor.contiguous(), async_op=True))
        for i, t in enumerate(tensors):
            t.copy_(flat[i])

    async def gather(self, tensor, gather_list=None, dst=0, world_name=None):
        """``gather_list``: at ``dst``, one tensor per rank, each shaped like ``tensor``."""
        import torch

        flat = None
        if gather_list is not None:
            flat = torch.empty((len(gather_list),) + tuple(tensor.shape), dtype=tensor.dtype,
                               device=tensor.device)
        await self._run(world_name, lambda: self._comm.gather(
            world_name, flat, tensor.contiguous(), dst, async_op=True))
        if gather_list is not None:
            for i, t in enumerate(gather_list):
                t.copy_(flat[i])

    async def scatter(self, tensor, scatter_list=None, src=0, world_name=None):
        """``scatter_list``: at ``src``, one tensor per rank, each shaped like ``tensor``."""
        import torch

        flat = None
        if scatter_list is not None:
            flat = torch.stack([t.to(tensor.dtype) for t in scatter_list]).contiguous()
        await self._run(world_name, lambda: self._comm.scatter(
            world_name, tensor, flat, src, async_op=True))


class WorldManager:
    """The worlds of this process, with the original MultiWorld API."""

    def __init__(self, enable_monitor=True):
        self._native = _core.WorldManager()
        self._communicator = WorldCommunicator(self)
        self._pending_drop = set()  # broken worlds raised to the caller, removed next

    @property
    def communicator(self):
        """The :class:`WorldCommunicator` of this manager's worlds."""
        return self._communicator

    async def initialize_world(self, world_name, rank, world_size, backend="gloo",
                               addr="127.0.0.1", port=-1, timeout=30, device=None,
                               token=None):
        """Joins the world (a coroutine). Rank 0 hosts its store at ``addr:port``; ``token``
        (default: ``$MW_STORE_TOKEN``, if set) is the secret every member presents to it."""
        self._drop_pending(world_name)  # a broken generation of the name, if not removed yet
        dev = None
        if backend == "nccl" and device is not None:
            dev = str(device)
        work = self._native.initialize_world(
            world_name, rank, world_size, backend=backend, addr=addr,
            port=max(int(port), 0), timeout=timeout, device=dev,
            token=token if token is not None else os.environ.get("MW_STORE_TOKEN") or None,
            async_op=True)
        await work
        self._communicator.add_world(world_name, backend)

    def add_world(self, world_name, backend="gloo"):
        """Kept for the original's callers: worlds are added by initialize_world."""
        self._communicator.add_world(world_name, backend)

    def remove_world(self, world_name):
        """Leaves the world; its name can be initialized again. ValueError when unknown."""
        self._pending_drop.discard(world_name)
        try:
            self._native.remove_world(world_name)
        except Exception as e:
            raise ValueError(f"World {world_name} does not exist.") from e
        finally:
            self._communicator.remove_world(world_name)

    def store_port(self, world_name, timeout=30):
        """The port rank 0's store listens on (when it was given port -1 or 0)."""
        return self._native.store_port(world_name, timeout)

    def _drop(self, world_name):
        try:
            self.remove_world(world_name)
        except ValueError:
            pass

    def _drop_soon(self, world_name):
        """Removes a broken world once the running event loop gets to it (at once without one)."""
        if world_name in self._pending_drop:
            return
        self._pending_drop.add(world_name)
        try:
            asyncio.get_running_loop().call_soon(self._drop_pending, world_name)
        except RuntimeError:
            self._drop_pending(world_name)

    def _drop_pending(self, world_name):
        if world_name in self._pending_drop:
            self._drop(world_name)

    def cleanup(self):
        """Leaves every world, flushes stdout and ends the process, as the original does."""
        self._native.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
