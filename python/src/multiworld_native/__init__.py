"""multiworld_native: libmultiworld for Python.

One process belongs to many *worlds*: independent communicator groups, each with its own ranks,
backend, TCP rendezvous store (hosted by rank 0) and fate. A fault in one world (a peer killed,
silent or misbehaving) is detected within milliseconds and breaks only that world: its pending
and later operations raise :class:`BrokenWorldError`, while the process's other worlds go on.

The API:

* :class:`WorldManager` -- ``initialize_world(name, rank, size, backend="gloo",
  addr="127.0.0.1", port=0, timeout=60, token=None, heartbeat_timeout=1.0, device=None,
  op_timeout=60, executor_grace=None, host_store=True, async_op=False)`` joins a world
  (blocking, GIL released; ``async_op=True`` returns a :class:`Work`). All times are seconds.
  ``op_timeout`` is every operation's deadline in that world: an operation still pending then
  (a receive nobody answers included) breaks the world with cause ``"op_timeout"``;
  ``store_port(name, timeout)`` gives the port rank 0 picked when it was given port 0;
  ``remove_world(name)``, ``worlds()``, ``world(name)``, ``events()`` (an :class:`Events` queue
  whose ``next(timeout=None)`` returns a :class:`WorldEvent` or None), ``close()``.
* :class:`Communicator` -- ``Communicator(manager)``; every operation takes the world's name
  first: ``send/recv(world, tensor, peer, tag=0)``, ``isend/irecv`` (always asynchronous),
  ``broadcast(world, tensor, root)``, ``all_reduce(world, tensor, op="sum")``,
  ``reduce(world, tensor, root, op)``, ``all_gather(world, output, input)``,
  ``gather(world, output, input, root)``, ``scatter(world, output, input, root)``,
  ``reduce_scatter(world, output, input, op)``, ``all_to_all(world, output, input)``,
  ``barrier(world)``. ``op`` is ``"sum"``, ``"prod"``, ``"min"`` or ``"max"``. Blocking unless
  ``async_op=True``, which returns a :class:`Work`.
* :class:`Work` -- ``wait(timeout=None)`` (True, or raises; ``TimeoutError`` when ``timeout``
  passed first, the operation going on), ``is_completed()``, ``exception()``, and ``await work``
  in asyncio (a thread of the loop's default executor waits, GIL released).
  :func:`wait_any` waits for the first of several.

``multiworld_native.torch`` (imported on its own) gives a world as a ``torch.distributed``
process group: ``process_group(manager, world)`` (docs/python.md, "PyTorch process groups").

Tensors are torch tensors (or anything exporting ``__dlpack__``) of dtype float32, float64,
int32, int64, float16, bfloat16 or uint8, contiguous, on the CPU (gloo) or a CUDA device (nccl).
Operations use their memory in place, without copies; a tensor stays referenced until its
operation completes, even when its Work is dropped.

Errors: :class:`BrokenWorldError` (``world``, ``cause``, ``rank``, ``detected_at``, ``detail``),
``TimeoutError``, ``ValueError`` (bad arguments), :class:`MultiworldError` (``code``) otherwise.
"""

from . import _core
from ._core import (
    Communicator,
    Events,
    Work,
    WorldEvent,
    WorldInfo,
    WorldManager,
    report_check,
    report_metric,
    wait_any,
)
from .errors import BrokenWorldError, MultiworldError

__version__ = _core.__version__
#: Whether this build has the NCCL backend (opened at run time; needs a GPU to run).
WITH_NCCL = _core.WITH_NCCL

__all__ = [
    "BrokenWorldError",
    "Communicator",
    "Events",
    "MultiworldError",
    "Work",
    "WorldEvent",
    "WorldInfo",
    "WorldManager",
    "WITH_NCCL",
    "report_check",
    "report_metric",
    "wait_any",
]
