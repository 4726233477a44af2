"""A world as a ``torch.distributed`` process group (docs/python.md, "PyTorch process groups").

``process_group(manager, world)`` returns a :class:`WorldProcessGroup`, a Python subclass of
``torch.distributed.ProcessGroup`` whose operations run on the world through the native
runtime. Pass it as ``group=`` to ``dist.*`` calls and as ``process_group=`` to
DistributedDataParallel, without ``init_process_group``:

    pg = multiworld_native.torch.process_group(manager, "train")
    dist.all_reduce(t, group=pg)                     # raises BrokenWorldError if "train" breaks
    ddp = DistributedDataParallel(model, process_group=pg)

``register()`` adds backend ``"multiworld"`` for code that calls ``init_process_group`` or
``new_group``: each group is then a world of its own.

Every operation returns a torch ``Work`` whose ``wait()`` returns True once the operation is
done, or raises :class:`~multiworld_native.BrokenWorldError` (``world``, ``cause``, ``rank``,
``detected_at``) when the world broke; it never hangs past the break. ``get_future()`` completes
the same way without anyone calling ``wait()``; its failure is a RuntimeError with the
BrokenWorldError's text (torch's C++ futures carry errors as text), which is also what DDP's
``backward()`` raises when its world breaks.

Ranks: the group's ranks are the world's; ``global_ranks=`` says which global rank each is for
the ``dist.*`` calls that take global ranks.

torch versions: 1.x and 2.x (docs/python.md, "Versions"). torch's private structures are touched
in one adapter per generation, ``_torch1.py`` and ``_torch2.py``, and nowhere else. Under 2.x a
group is named ``multiworld:WORLD`` and is in torch's maps and name registry like its own
groups: DeviceMesh and the functional collectives find it.

Not supported: ``all_to_all_single`` with split sizes; a receive from any source; reduce ops
other than SUM, PRODUCT, MIN and MAX. torch 1.13 asks for a default group in
``dist.get_rank(pg)``, ``dist.gather`` and ``dist.scatter`` (use ``pg.rank()``, or
``register()``).

Thread rules: a group may be used from any thread, as the world's communicator may; operations
of one world are ordered as the runtime orders them (docs/python.md).
"""

from __future__ import annotations

import atexit
import collections
import copy
import os
import secrets
import threading
import time
import uuid
import weakref

import torch
import torch.distributed as dist
from torch.futures import Future

from . import _core
from .errors import MultiworldError

_c10d = torch._C._distributed_c10d

# The one place that knows torch's private structures, per torch generation.
if hasattr(_c10d, "Backend") and hasattr(_c10d.ProcessGroup, "_register_backend"):
    from . import _torch2 as _adapter
else:
    from . import _torch1 as _adapter

#: The torch versions this module is tested with (docs/python.md).
TESTED_TORCH = ("1.13", "2.11", "2.15")

_OPS = {}


def _reduce_op(op):
    """The runtime's name of a ``dist.ReduceOp``; ValueError for those it lacks."""
    if not _OPS:
        _OPS.update({dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "prod",
                     dist.ReduceOp.MIN: "min", dist.ReduceOp.MAX: "max"})
    for k, v in _OPS.items():
        if op == k:
            return v
    raise ValueError(f"multiworld process group: reduce op {op} is not supported "
                     "(SUM, PRODUCT, MIN, MAX and AVG are)")


# Completions of the Works whose future was asked for: a waiter thread waits for each such
# operation (the native wait releases the GIL), then completes its torch future. Each group has
# threads of its own, so that one world's stalled operations (its peer paused: hundreds of
# futures pending) never hold the completion of another world's: a fault stays in its world.
# Operations of one world complete in the order the runtime runs them, so a few threads serve it;
# they are daemon threads (an operation that never ends must not hold the interpreter's exit),
# made as operations need them and ended after _IDLE_S without work.
_IDLE_S = 30.0

# Set when the interpreter begins to exit (_at_exit): from then on no thread of this module runs
# torch code (completing a future runs torch's callbacks, and a daemon thread still inside torch
# when the interpreter finalizes aborts the process: "terminate called without an active
# exception"). The futures still pending then are never completed: the process is ending.
_exiting = threading.Event()
_all_waiters = weakref.WeakSet()


class _Waiters:
    """The threads that complete one group's futures: at most `most`, each running the
    submitted completions in order. stop() (the group's close) ends the idle ones at once."""

    def __init__(self, name, most=4):
        self._name = name
        self._most = most
        self._cv = threading.Condition(threading.Lock())
        self._queue = collections.deque()
        self._idle = {}  # thread -> True while it waits for work
        self._stopped = False
        _all_waiters.add(self)

    def submit(self, fn):
        with self._cv:
            self._queue.append(fn)
            if any(self._idle.values()):
                self._cv.notify()
            elif len(self._idle) < self._most:
                t = threading.Thread(target=self._run, name=f"mw-torch-wait-{self._name}",
                                     daemon=True)
                self._idle[t] = False
                t.start()

    def _run(self):
        me = threading.current_thread()
        while True:
            with self._cv:
                self._idle[me] = True
                while not self._queue or _exiting.is_set():
                    if (self._stopped or _exiting.is_set()
                            or (not self._cv.wait(_IDLE_S) and not self._queue)):
                        del self._idle[me]
                        return
                self._idle[me] = False
                fn = self._queue.popleft()
            try:
                fn()  # _Work._complete: hands every error of the operation to its future
            except BaseException:
                with self._cv:
                    del self._idle[me]
                raise

    def stop(self):
        """Ends the threads that wait for work (those completing an operation end after it)."""
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
            idle = [t for t, waiting in self._idle.items() if waiting]
        for t in idle:
            t.join(1.0)

    def end(self, seconds):
        """At exit: drops what was not started and waits up to `seconds` for every thread to
        end (one inside a native wait ends when that wait returns)."""
        with self._cv:
            self._stopped = True
            self._queue.clear()
            self._cv.notify_all()
            threads = list(self._idle)
        deadline = time.monotonic() + seconds
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def threads(self):
        """How many threads this group has now (for tests)."""
        with self._cv:
            return len(self._idle)


# Lifetime. torch calls a Work's Python methods from C++ through a pybind trampoline, which finds
# them only while the Python object lives; torch's C++ callers (DDP's parameter check, bucket
# reduction and broadcasts) hold the C++ part alone, so once Python drops its last reference their
# wait() reaches c10d's base wait, which nothing completes: a hang. Each Work therefore stays in
# `_live` until it completed and someone consumed it (wait, get_future or result); a completed
# Work nobody consumes is let go after _UNCLAIMED_S, long past any C++ caller's next statement.
_UNCLAIMED_S = 60.0


class _Live:
    def __init__(self):
        self._lock = threading.Lock()
        self._works = {}  # id -> Work, until done and consumed
        # (deadline, weakref) of works done before anyone consumed them, oldest first
        self._unclaimed = collections.deque()

    def add(self, work):
        with self._lock:
            self._works[id(work)] = work
            now = time.monotonic()
            while self._unclaimed and self._unclaimed[0][0] <= now:
                w = self._unclaimed.popleft()[1]()
                if w is not None and self._works.get(id(w)) is w:
                    del self._works[id(w)]

    def settle(self, work):
        """Called when `work` completed or was consumed: let go once both hold; a work done
        but not consumed is let go _UNCLAIMED_S later."""
        with self._lock:
            if self._works.get(id(work)) is not work:
                return
            if work._done and work._consumed:
                del self._works[id(work)]
            elif work._done:
                self._unclaimed.append((time.monotonic() + _UNCLAIMED_S, weakref.ref(work)))

    def __len__(self):
        with self._lock:
            return len(self._works)


_live = _Live()


class _Failed:
    """The value a failed operation's inner future completes with: torch 1.13's
    ``Future.set_exception`` keeps the error on the Python side only (C++ sees a success whose
    value is the exception, and DDP's reducer crashes reading it as a tensor), so the error
    reaches the public future as a real C++ error by being raised in a ``then`` callback."""

    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


def _unwrap(fut):
    value = fut.value()
    if isinstance(value, _Failed):
        raise copy.copy(value.error)
    return value


class _Work(_c10d.Work):
    """A torch ``Work`` for one native operation. It completes in the first thread that needs
    it: the caller of ``wait()`` (no other thread involved: the blocking ``dist.*`` path), or a
    waiter thread started by ``get_future()``, whose future must complete without anyone
    waiting. Completing runs `after` (copies into the caller's tensors) once, before the
    future gets `result`."""

    def __init__(self, native, result, after=None, side=None, keep=(), waiters=None):
        super().__init__()
        self._native = native
        self._waiters = waiters  # the group's (get_future)
        self._after = after
        self._result = result
        self._lock = threading.Lock()
        self._fut = None        # what get_future() gives (made on first call): fails for real
        self._waiter = False
        self._done = False
        self._consumed = False
        self._gpu = False       # CUDA tensors: done at once (_start_cuda)
        self._copied = None     # their copy-outs' event, when there are copy-outs
        device = getattr(native, "cuda_device", -1)
        if device >= 0 and side is not None:
            self._start_cuda(device, side(device), keep)
        else:
            self._inner = Future()  # never fails: the result, or a _Failed
        _live.add(self)
        if self._done:
            _live.settle(self)  # done at once: let go 60 s from now unless consumed sooner

    def _start_cuda(self, device, stream, keep):
        """An operation on CUDA tensors: `stream` (the group's own for `device`) waits for it on
        the GPU, its copy-outs run there after it, and from torch's view the Work is done at
        once, as c10d's NCCL works are: wait() and the future (CUDA-aware) make the caller's
        stream wait for `stream`; the host never waits for the GPU. A failure seen after this
        fails the native operation (is_completed, exception) and the world's later operations;
        the outputs are then undefined (docs/python.md). Kept short: DDP calls it per bucket."""
        error = None
        with torch.cuda.stream(stream):
            try:
                self._native.wait()  # on a stream-ordered world: `stream` waits, the host not
            except BaseException as e:  # noqa: BLE001 - handed to the future
                error = e
            if self._after is not None:
                if error is None:
                    for t in _tensors(self._result) + list(keep):
                        t.record_stream(stream)  # used there: not reused before it is done
                    try:
                        self._after()
                    except BaseException as e:  # noqa: BLE001
                        error = e
                self._after = None
                self._copied = torch.cuda.Event()
                self._copied.record(stream)
            fut = Future(devices=[_cuda_device(device)])
            fut.set_result(self._result if error is None
                           else _Failed(error.with_traceback(None)))
        self._inner = fut
        if error is None:
            self._fut = fut  # get_future() gives it as it is (a failure goes through _unwrap)
        self._gpu = True
        self._done = True

    def _complete(self):
        """Waits for the native operation (GIL released), then completes once."""
        error = None
        try:
            self._native.wait()
        except BaseException as e:  # noqa: BLE001 - handed to the future
            error = e
        with self._lock:
            if self._done or _exiting.is_set():
                return
            if error is None and self._after is not None:
                try:
                    self._after()
                except BaseException as e:  # noqa: BLE001
                    error = e
            self._after = self._native = None
            # Without this frame's traceback: it holds this Work, whose future would hold the
            # error back, a cycle through torch's future that no collector breaks.
            self._inner.set_result(self._result if error is None
                                   else _Failed(error.with_traceback(None)))
            self._done = True
        _live.settle(self)

    def _consume(self):
        if not self._consumed:
            self._consumed = True
            _live.settle(self)

    def wait(self, timeout=None):
        """True once done; raises BrokenWorldError (or the operation's error) otherwise."""
        self._consume()  # first: completing then lets the Work go at once
        if not self._done:
            self._complete()
        error = self._error()
        if error is not None:
            # A copy: raising the stored object would grow its traceback with the caller's
            # frames, which hold this Work: a cycle through torch's future again.
            raise copy.copy(error)
        return True

    def _error(self):
        """Waits until completed, then gives the operation's error (no traceback), or None."""
        value = self._inner.wait()
        return value.error if isinstance(value, _Failed) else None

    def is_completed(self):
        if self._gpu:  # done once the GPU finished the operation and its copy-outs
            native = self._native
            return ((native is None or native.is_completed())
                    and (self._copied is None or self._copied.query()))
        if self._inner.done():  # done before its future's callbacks run, ours and the user's
            return True
        native = self._native
        if native is None or not native.is_completed():
            return self._inner.done()
        self._complete()  # done natively: completing does not block
        return True

    def is_success(self):
        return self.is_completed() and self._error() is None

    def exception(self):
        if self._gpu and self.is_completed():
            failed = self._inner.value()
            if isinstance(failed, _Failed):
                return failed.error
            return self._native.exception()
        return self._error() if self.is_completed() else None

    def result(self):
        self.wait()
        return self._result

    def get_future(self):
        """The operation's torch future: its value is the output tensors; when the operation
        fails it fails with a RuntimeError whose text is the BrokenWorldError's (torch's C++
        futures carry errors as text), where ``wait()`` raises the BrokenWorldError itself."""
        self._consume()
        with self._lock:
            if self._fut is None:
                self._fut = self._inner.then(_unwrap)
            start = not self._done and not self._waiter
            self._waiter = True
        if start:
            self._waiters.submit(self._complete)
        return self._fut


class _AllOf:
    """Several native operations of one world as one (what _Work completes): done when all are,
    failed with the first failure in order."""

    def __init__(self, works):
        self._works = works
        self.cuda_device = getattr(works[0], "cuda_device", -1) if works else -1

    def wait(self, timeout=None):
        for w in self._works:
            w.wait()
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)

    def exception(self):
        for w in self._works:
            e = w.exception()
            if e is not None:
                return e
        return None


_devices = {}


def _cuda_device(index):
    """torch.device("cuda", index), made once."""
    d = _devices.get(index)
    if d is None:
        d = _devices[index] = torch.device("cuda", index)
    return d


def _tensors(value):
    """The tensors in `value` (a tensor, or lists of them)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _pairs(outputs, inputs):
    if len(outputs) != len(inputs):
        raise ValueError(f"multiworld process group: a coalesced operation needs one output per "
                         f"input (got {len(outputs)} and {len(inputs)})")
    return zip(outputs, inputs)


def _one(tensors, what):
    if len(tensors) != 1:
        raise ValueError(f"multiworld process group: {what} takes one tensor per rank "
                         f"(got {len(tensors)})")
    return tensors[0]


class _WorldOps:
    """The operations of one world, under the names torch's C++ looks up in Python: a 1.x
    ``ProcessGroup`` and a 2.x ``Backend`` alike (_torch1.py, _torch2.py). `_attach` sets it up."""

    def _attach(self, manager, world, info):
        self._manager = manager
        self._comm = _core.Communicator(manager)
        self._world = world
        self._rank = info.rank
        self._size = info.size
        self._owned = None  # register()'s groups: removes their world (weakref.finalize)
        self._side = {}     # CUDA device -> this group's stream for its works' copy-outs
        self._waiters = _Waiters(world)  # completes this group's futures (get_future)
        self._side_lock = threading.Lock()

    def _side_stream(self, device):
        """This group's own stream on `device`: its works' copy-outs run there after the
        operation, so that another world's stall never holds them (one per group)."""
        stream = self._side.get(device)
        if stream is None:
            with self._side_lock:
                stream = self._side.get(device)
                if stream is None:
                    stream = self._side[device] = torch.cuda.Stream(device=device)
        return stream

    def _work(self, native, result, after=None, keep=()):
        return _Work(native, result, after, side=self._side_stream, keep=keep,
                     waiters=self._waiters)

    def _close_ops(self):
        """Ends the completion threads and removes the world when this group made it."""
        self._waiters.stop()
        if self._owned is not None:
            self._owned()  # a weakref.finalize: runs once

    def _release(self):
        """At exit: lets go of the communicator and the manager, which torch's structures would
        otherwise hold past the native module's end; an operation after it raises."""
        self._comm = _Exited()
        self._manager = None

    def getBackendName(self):  # noqa: N802 - torch's name
        return "multiworld"

    def _reducing(self, opts, outputs):
        """(the runtime's op, what runs after it) for `opts.reduceOp` (SUM without opts) into
        `outputs`: AVG (FSDP2 asks for it) is a sum divided by the world's size afterwards, for
        floating-point tensors; ValueError for an op the runtime lacks."""
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        if op != dist.ReduceOp.AVG:
            return _reduce_op(op), None
        for t in outputs:
            if not t.is_floating_point():
                raise ValueError(f"multiworld process group: reduce op AVG needs floating-point "
                                 f"tensors (got {t.dtype})")
        size = self._size

        def after():
            for t in outputs:
                t.div_(size)

        return "sum", after

    # ---- collectives ----

    def allreduce(self, tensors, opts=None):
        t = _one(tensors, "allreduce")
        op, after = self._reducing(opts, [t])
        return self._work(self._comm.all_reduce(self._world, t, op=op, async_op=True), tensors,
                          after)

    def broadcast(self, tensors, opts=None):
        t = _one(tensors, "broadcast")
        root = opts.rootRank if opts is not None else 0
        return self._work(self._comm.broadcast(self._world, t, root, async_op=True), tensors)

    def reduce(self, tensors, opts=None):
        t = _one(tensors, "reduce")
        op, after = self._reducing(opts, [t])
        return self._work(self._comm.reduce(self._world, t, opts.rootRank, op=op, async_op=True),
                          tensors, after if self._rank == opts.rootRank else None)

    def allgather(self, output_tensors, input_tensors, opts=None):
        t = _one(input_tensors, "allgather").contiguous()
        outs = _one(output_tensors, "allgather")
        if len(outs) != self._size:
            raise ValueError(f"multiworld process group: allgather needs {self._size} output "
                             f"tensors (got {len(outs)})")
        flat = torch.empty((self._size,) + tuple(t.shape), dtype=t.dtype, device=t.device)

        def after():
            for i, o in enumerate(outs):
                o.copy_(flat[i])

        return self._work(self._comm.all_gather(self._world, flat, t, async_op=True),
                          output_tensors, after, keep=(flat, t))

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        return self._work(self._comm.all_gather(self._world, output, input, async_op=True),
                          [output])

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = _one(output_tensors, "reduce_scatter")
        ins = _one(input_tensors, "reduce_scatter")
        if len(ins) != self._size:
            raise ValueError(f"multiworld process group: reduce_scatter needs {self._size} "
                             f"input tensors (got {len(ins)})")
        flat = torch.stack([i.contiguous() for i in ins])
        op, after = self._reducing(opts, [out])
        return self._work(self._comm.reduce_scatter(self._world, out, flat, op=op, async_op=True),
                          output_tensors, after, keep=(flat,))

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        op, after = self._reducing(opts, [output])
        return self._work(self._comm.reduce_scatter(self._world, output, input, op=op,
                                                    async_op=True),
                          [output], after)

    def gather(self, output_tensors, input_tensors, opts=None):
        t = _one(input_tensors, "gather").contiguous()
        root = opts.rootRank
        if self._rank != root:
            return self._work(self._comm.gather(self._world, None, t, root, async_op=True),
                              output_tensors, keep=(t,))
        outs = _one(output_tensors, "gather")
        flat = torch.empty((self._size,) + tuple(t.shape), dtype=t.dtype, device=t.device)

        def after():
            for i, o in enumerate(outs):
                o.copy_(flat[i])

        return self._work(self._comm.gather(self._world, flat, t, root, async_op=True),
                          output_tensors, after, keep=(flat, t))

    def scatter(self, output_tensors, input_tensors, opts=None):
        out = _one(output_tensors, "scatter")
        root = opts.rootRank
        flat = None
        if self._rank == root:
            flat = torch.stack([i.contiguous() for i in _one(input_tensors, "scatter")])
        return self._work(self._comm.scatter(self._world, out, flat, root, async_op=True),
                          output_tensors, keep=() if flat is None else (flat,))

    def alltoall(self, output_tensors, input_tensors, opts=None):
        if len(input_tensors) != self._size or len(output_tensors) != self._size:
            raise ValueError(f"multiworld process group: alltoall needs {self._size} input and "
                             "output tensors")
        flat_in = torch.stack([i.contiguous() for i in input_tensors])
        flat_out = torch.empty_like(flat_in)

        def after():
            for i, o in enumerate(output_tensors):
                o.copy_(flat_out[i])

        return self._work(self._comm.all_to_all(self._world, flat_out, flat_in, async_op=True),
                          output_tensors, after, keep=(flat_in, flat_out))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes,  # noqa: A002
                      opts=None):
        if list(output_split_sizes) or list(input_split_sizes):
            raise ValueError("multiworld process group: all_to_all_single with split sizes is "
                             "not supported (equal blocks are)")
        return self._work(self._comm.all_to_all(self._world, output, input, async_op=True),
                          [output])

    def barrier(self, opts=None):
        return self._work(self._comm.barrier(self._world, async_op=True), [])

    # ---- point to point ----

    def send(self, tensors, dst, tag=0):
        t = _one(tensors, "send")
        return self._work(self._comm.isend(self._world, t, dst, tag=tag), tensors)

    def recv(self, tensors, src, tag=0):
        t = _one(tensors, "recv")
        return self._work(self._comm.irecv(self._world, t, src, tag=tag), tensors)

    def recv_anysource(self, tensors, tag=0):
        raise MultiworldError("multiworld process group: a receive from any source is not "
                              "supported; name the peer", "unsupported")

    # The coalesced forms (torch 2.x's functional collectives and coalescing managers): one
    # operation per tensor, in order, under one Work.
    def allreduce_coalesced(self, tensors, opts=None):
        op, after = self._reducing(opts, tensors)
        return self._work(_AllOf([self._comm.all_reduce(self._world, t, op=op, async_op=True)
                                  for t in tensors]), tensors, after)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._work(_AllOf([self._comm.all_gather(self._world, o, i, async_op=True)
                                  for o, i in _pairs(outputs, inputs)]), outputs)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        op, after = self._reducing(opts, outputs)
        return self._work(_AllOf([self._comm.reduce_scatter(self._world, o, i, op=op,
                                                            async_op=True)
                                  for o, i in _pairs(outputs, inputs)]), outputs, after)

    # torch 2.x's names of the single-tensor forms (its C++ looks these up first).
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_to_all_single = alltoall_base


# The operations a world's group serves, by the names torch looks up in Python.
_OP_NAMES = ("allreduce", "allreduce_coalesced", "all_gather_single_coalesced",
             "reduce_scatter_single_coalesced", "broadcast", "reduce", "allgather", "_allgather_base",
             "all_gather_single", "reduce_scatter", "_reduce_scatter_base",
             "reduce_scatter_single", "gather", "scatter", "alltoall", "alltoall_base",
             "all_to_all_single", "barrier", "send", "recv", "recv_anysource")


def _world_info(manager, world):
    info = manager.world(world)
    if info is None:
        raise ValueError(f"multiworld process group: no world '{world}' in this manager")
    return info


_names = collections.Counter()  # world -> groups made for it (their names: _group_name)
_names_lock = threading.Lock()


def _group_name(world):
    """The torch group name of a new group of `world`: "multiworld:WORLD", then
    "multiworld:WORLD#2", ... for further groups of the same world in this process (the same on
    every member that makes its groups in the same order)."""
    with _names_lock:
        _names[world] += 1
        n = _names[world]
    return f"multiworld:{world}" + (f"#{n}" if n > 1 else "")


# Whether a world's group holds a Python ``Backend`` that runs its operations (torch 2.x whose
# c10d lets a Python class be a Backend: 2.15 does) or runs them itself (torch 1.x, and the 2.x
# whose Backend has no Python constructor: 2.11). Either way torch sees a ProcessGroup; under 2.x
# it is entered in torch's maps and its registry of group names by the adapter.
_GROUP_HOLDS_BACKEND = _adapter.GENERATION == 2 and _adapter.python_backend()

# register()'s backends under _GROUP_HOLDS_BACKEND, held until torch shuts them down: torch holds
# only their C++ part, and its calls find the Python methods only while the Python object lives.
_kept = set()

if not _GROUP_HOLDS_BACKEND:

    class WorldProcessGroup(_WorldOps, dist.ProcessGroup):
        """A ``torch.distributed.ProcessGroup`` backed by one world of a ``WorldManager``
        (the group runs the operations itself: torch 1.x, and 2.x without Python backends)."""

        def __init__(self, manager, world):
            info = _world_info(manager, world)
            dist.ProcessGroup.__init__(self, info.rank, info.size)
            self._attach(manager, world, info)
            if _adapter.GENERATION == 2:
                self._name = _group_name(world)

        def getBackendName(self):  # noqa: N802 - torch's name
            return "multiworld"

        if _adapter.GENERATION == 2:
            # torch keeps a group's name in its backends, and this group has none.
            @property
            def group_name(self):
                """The group's name in torch's registry (``multiworld:WORLD``)."""
                return self._name

            @property
            def group_desc(self):
                return self._name

        @property
        def _ops(self):
            """What runs the operations: the group itself in torch 1.x (no cycle: a property)."""
            return self

        @property
        def world(self):
            """The world's name."""
            return self._world

        def close(self):
            """Forgets the group in torch's maps, and removes the world when the group made it
            (``register()``'s groups); a world given to ``process_group`` stays: remove it with
            its manager. Idempotent. A group not closed lives as long as torch's maps: the
            process."""
            _adapter.forget(self)
            self._close_ops()

    def _owned_backend(manager, name):
        return WorldProcessGroup(manager, name)

else:

    class _WorldBackend(_WorldOps, _c10d.Backend):
        """The torch 2.x ``Backend`` of one world: what a world's group dispatches to."""

        def __init__(self, manager, world, info=None):
            info = info or _world_info(manager, world)
            _c10d.Backend.__init__(self, info.rank, info.size)
            self._attach(manager, world, info)

        @property
        def options(self):
            return _c10d.Backend.Options("multiworld")

        def supports_tensor_alloc(self, device):
            return False

        def shutdown(self):
            """torch's destroy_process_group: the completion threads end, and the world goes
            when this backend's group made it."""
            _kept.discard(self)
            self._close_ops()

        def abort(self):
            self.shutdown()

    for _f in _adapter.UNSUPPORTED_FEATURES:
        setattr(_WorldBackend, _f, False)
    del _f

    class WorldProcessGroup(dist.ProcessGroup):
        """A ``torch.distributed.ProcessGroup`` backed by one world of a ``WorldManager``
        (torch 2.x: a group whose cpu and cuda backend is the world's)."""

        def __init__(self, manager, world):
            info = _world_info(manager, world)
            dist.ProcessGroup.__init__(self, info.rank, info.size)
            self._ops = _WorldBackend(manager, world, info)  # kept: torch calls its methods
            self._name = _group_name(world)

        def getBackendName(self):  # noqa: N802 - torch's name
            return "multiworld"

        @property
        def world(self):
            """The world's name."""
            return self._ops._world

        def close(self):
            """Forgets the group in torch's maps and registry, and ends its threads; a world
            given to ``process_group`` stays: remove it with its manager. Idempotent. A group
            not closed lives as long as torch's maps: the process."""
            _adapter.forget(self)
            self._ops._close_ops()

    # The group's operations, called from Python (dist.*), run the backend's at once: the caller
    # gets the backend's own Work, whose is_completed/is_success/exception are its own. (From
    # C++, torch wraps a Python backend's Work in a holder that forwards wait() and
    # get_future() only: docs/python.md, "torch versions".)
    def _delegate(name):
        def op(self, *args, **kwargs):
            return getattr(self._ops, name)(*args, **kwargs)

        op.__name__ = name
        return op

    for _f in _OP_NAMES:
        setattr(WorldProcessGroup, _f, _delegate(_f))
    del _f

    def _owned_backend(manager, name):
        backend = _WorldBackend(manager, name)
        _kept.add(backend)
        return backend


def _rank_map():
    """torch's map from a group to its {global rank: group rank}, read by ``dist.*`` for
    ``src=``/``dst=``, ``get_rank(group)`` and ``get_process_group_ranks`` (the adapter's)."""
    return _adapter.rank_map()


def device_mesh(pg, device_type="cpu"):
    """A one-dimensional ``torch.distributed.device_mesh.DeviceMesh`` over `pg` (a group
    ``process_group`` made), for FSDP2's ``fully_shard(mesh=...)``, DTensor and the like, with
    or without a default group (``DeviceMesh.from_group`` asks the default group for this
    process's rank). The mesh's ranks are the group's global ranks (``global_ranks=``).
    `device_type`: "cpu" (gloo worlds) or "cuda" (nccl worlds). torch 2.x only: MultiworldError
    (code ``unsupported``) under 1.x and under a 2.x whose c10d lets no Python class be a Backend
    (2.11); ValueError when `pg` is not a world's group."""
    if not isinstance(pg, WorldProcessGroup):
        raise ValueError(f"multiworld device_mesh: {pg!r} is not a world's group "
                         "(make one with process_group)")
    if _adapter.GENERATION < 2:
        raise MultiworldError(f"multiworld device_mesh: torch {torch.__version__} has no "
                              "DeviceMesh (torch 2.x has)", "unsupported")
    if not _GROUP_HOLDS_BACKEND:
        raise MultiworldError(f"multiworld device_mesh: torch {torch.__version__} lets no Python "
                              "class be a c10d Backend, and a mesh's users (DTensor, FSDP2, the "
                              "functional collectives) reach a group only through one; torch "
                              "2.15 does (docs/python.md, \"torch versions\")", "unsupported")
    return _adapter.device_mesh(pg, device_type)


def gloo_group(store, rank, size, timeout=None):
    """A c10d Gloo group of `size` ranks over torch store `store`, made without
    ``init_process_group`` (so several may live in one process, one per thread): the baseline a
    world is compared with in tests and benchmarks, under either torch. `timeout`: a timedelta
    (default 60 s)."""
    import datetime
    return _adapter.gloo_group(store, rank, size, timeout or datetime.timedelta(seconds=60))


def process_group(manager, world, global_ranks=None):
    """A ``torch.distributed.ProcessGroup`` for world `world` of `manager` (joined already).

    `global_ranks`: the global rank (the default group's) of each world rank, in world-rank
    order, for ``dist.*`` calls that take global ranks (``src=``, ``dst=``, and
    ``dist.get_rank(pg)``, which needs a default group in torch 1.13). Default: world rank i is
    global rank i, which is what those calls see without a default group.
    ValueError when the manager has no such world or `global_ranks` is not one distinct
    non-negative int per member."""
    if not dist.is_available():
        raise MultiworldError("this torch has no torch.distributed", "unsupported")
    pg = WorldProcessGroup(manager, world)
    if global_ranks is None:
        global_ranks = range(pg.size())
    global_ranks = list(global_ranks)
    if (len(global_ranks) != pg.size() or len(set(global_ranks)) != len(global_ranks)
            or not all(isinstance(g, int) and g >= 0 for g in global_ranks)):
        raise ValueError(f"multiworld process group: global_ranks must hold {pg.size()} "
                         f"distinct non-negative ints, one per rank of world '{world}' "
                         f"(got {global_ranks!r})")
    _adapter.add_group(pg, pg._ops if pg._ops is not pg else None,
                       getattr(pg, "_name", None), global_ranks)
    _groups.add(pg)
    return pg


# The groups process_group made, for the exit: torch's maps and (2.x) its C++ registry of group
# names hold a group for the whole process, and what they hold at exit is never freed: nanobind
# then reports the group's communicator and manager as leaked. _at_exit lets them go first.
_groups = weakref.WeakSet()


class _Exited:
    def __getattr__(self, name):
        raise MultiworldError("multiworld process group: the process is exiting", "closed")


def _at_exit():
    """Before the interpreter finalizes: no future is completed any more (torch code in a
    daemon thread then aborts the process), the worlds behind the groups are removed (as their
    managers' close() does: the process is ending) so that every completion thread's native
    wait returns and the thread ends, and the groups, their pending operations and their
    managers are let go of torch's structures (nanobind then reports nothing leaked)."""
    _exiting.set()
    ops = [pg._ops for pg in list(_groups)]
    ops += list(_kept)
    with _backend_lock:
        default, _backend["manager"] = _backend["manager"], None
    managers = {id(o._manager): o._manager for o in ops if o._manager is not None}
    if default is not None:
        managers[id(default)] = default
    with _live._lock:
        works = list(_live._works.values())
        _live._works.clear()
        _live._unclaimed.clear()
    for m in managers.values():
        try:
            m.close()
        except (MultiworldError, RuntimeError):
            pass
    for waiters in list(_all_waiters):
        waiters.end(2.0)
    for w in works:
        w._native = w._after = None
    for pg in list(_groups):
        _adapter.forget(pg)
    for backend in list(_kept):
        backend.shutdown()
    for o in ops:
        o._release()


atexit.register(_at_exit)


# ---- the "multiworld" backend of init_process_group and new_group ----

_KEY = "multiworld/world"
_backend = {"manager": None, "addr": None, "options": {}, "registered": False}
_backend_lock = threading.Lock()


def register(manager=None, addr=None, **world_options):
    """Registers torch.distributed backend ``"multiworld"``: ``init_process_group(backend=
    "multiworld", ...)`` and ``new_group(ranks, backend="multiworld")`` then make a world per
    group, whose group rank 0 hosts the world's store and publishes its address, port and a
    fresh token through torch's store (the group's trust root).

    `manager`: the WorldManager the groups' worlds join (default: one made on first use and
    kept for the process). `addr`: the address this process's store listens on and the other
    members connect to when it is a group's rank 0 (default ``$MULTIWORLD_ADDR``, else
    127.0.0.1: one machine). `world_options`: passed to ``initialize_world`` (``heartbeat_timeout``,
    ``op_timeout``, ``backend``, ``device``). Calling it again replaces these settings for
    the groups made after; torch's registration is made once."""
    with _backend_lock:
        _backend["manager"] = manager
        _backend["addr"] = addr
        _backend["options"] = dict(world_options)
        if not _backend["registered"]:  # torch refuses a second registration of a name
            _adapter.register_backend("multiworld", _create)
            _backend["registered"] = True


def _create(store, rank, size, timeout):
    """torch's backend creator: joins a new world as `rank` of `size`; the name, address, port
    and token come from group rank 0 through `store` (a PrefixStore of the group)."""
    with _backend_lock:
        manager = _backend["manager"]
        if manager is None:
            manager = _backend["manager"] = _core.WorldManager()
        addr = _backend["addr"] or os.environ.get("MULTIWORLD_ADDR") or "127.0.0.1"
        options = dict(_backend["options"])
    seconds = max(1.0, timeout.total_seconds())
    if rank == 0:
        name = f"torch-{uuid.uuid4().hex[:16]}"
        token = secrets.token_hex(16)
        join = manager.initialize_world(name, 0, size, addr=addr, port=0, timeout=seconds,
                                        token=token, async_op=True, **options)
        port = manager.store_port(name, seconds)
        store.set(_KEY, f"{name} {addr} {port} {token}")
        join.wait(seconds)
    else:
        published = store.get(_KEY).decode(errors="replace")
        fields = published.split()
        if len(fields) != 4 or not fields[2].isdigit() or not 0 < int(fields[2]) < 65536:
            raise MultiworldError(f"multiworld backend: torch's store holds {published[:200]!r} "
                                  f"under '{_KEY}' for this group, not 'NAME ADDR PORT TOKEN' "
                                  "as group rank 0 publishes it", "protocol_error")
        name, addr, port, token = fields
        manager.initialize_world(name, rank, size, addr=addr, port=int(port), timeout=seconds,
                                 token=token, **options)
    backend = _owned_backend(manager, name)
    backend._owned = weakref.finalize(backend, _remove_quietly, manager, name)
    return backend


def _remove_quietly(manager, name):
    try:
        manager.remove_world(name)
    except (MultiworldError, ValueError, RuntimeError):
        pass  # already removed, or the manager closed
