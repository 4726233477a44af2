"""Shared helpers: worlds whose ranks are threads of the test process, each rank with its own
WorldManager (the binding releases the GIL in every blocking call, so the threads progress)."""

import gc
import itertools
import os
import threading
import time

import pytest

import multiworld_native as mw

_names = itertools.count()


def run_threads(fns, timeout=30):
    """Runs each of `fns` (no arguments) on a thread of its own; returns their results in order
    and re-raises the first exception any of them raised. Fails when one is still running after
    `timeout` seconds."""
    results = [None] * len(fns)
    errors = [None] * len(fns)

    def body(i):
        try:
            results[i] = fns[i]()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            errors[i] = e

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a rank hung"
    for e in errors:
        if e is not None:
            raise e
    return results


def open_fds():
    """This process's descriptors and what each is (a socket, a pipe, a file)."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed already
            pass
    return out


def settled_fds(limit, seconds=5.0):
    """The descriptors, once at most `limit` (or after `seconds`): one that another thread is
    closing right now, or that an object only the garbage collector frees holds, is no leak."""
    deadline = time.monotonic() + seconds
    fds = open_fds()
    while len(fds) > limit and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
        fds = open_fds()
    return fds


def task_names():
    """The names of this process's threads, sorted (each of the runtime's is named mw-<role>,
    runtime/src/base/thread_name.h)."""
    names = []
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # ended meanwhile
            pass
    return sorted(names)


def unique_name(prefix="w"):
    return f"{prefix}{next(_names)}"


class LocalWorld:
    """`size` ranks of one world, rank i with its own manager and communicator."""

    def __init__(self, size, name=None, **options):
        self.name = name or unique_name()
        self.size = size
        self.managers = [mw.WorldManager() for _ in range(size)]
        self.comms = [mw.Communicator(m) for m in self.managers]
        joins = [self.managers[0].initialize_world(self.name, 0, size, port=0, timeout=20,
                                                   async_op=True, **options)]
        self.port = self.managers[0].store_port(self.name, 10)
        for r in range(1, size):
            joins.append(self.managers[r].initialize_world(
                self.name, r, size, port=self.port, timeout=20, async_op=True, **options))
        for j in joins:
            assert j.wait(30) is True

    def run(self, fn, timeout=30):
        """Runs fn(rank, comm) on one thread per rank; returns the results by rank and re-raises
        the first exception of any rank."""
        return run_threads([lambda r=r: fn(r, self.comms[r]) for r in range(self.size)],
                           timeout)

    def close(self):
        for m in self.managers:
            m.close()


@pytest.fixture(scope="module")
def world2():
    w = LocalWorld(2)
    yield w
    w.close()


@pytest.fixture(scope="module")
def world3():
    w = LocalWorld(3)
    yield w
    w.close()


def needs_fsdp2():
    """Skips, saying why, where FSDP2 cannot run on a world: torch 1.x has no
    ``torch.distributed.fsdp.fully_shard``, and a torch 2.x whose c10d lets no Python class be a
    Backend (2.11) cannot reach a world's group from DTensor (``device_mesh`` refuses it; tested
    in test_torch2.py). The gate runs these tests under its torch 2.15 (build/torch2-env)."""
    import torch

    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except Exception:  # noqa: BLE001 - 1.13 has none; on Python 3.11 its fsdp does not import
        pytest.skip(f"torch {torch.__version__} has no FSDP2 (fully_shard): torch 2.x runs it")
    from multiworld_native import torch as mwtorch

    if not mwtorch._GROUP_HOLDS_BACKEND:
        pytest.skip(f"torch {torch.__version__}: its c10d lets no Python class be a Backend, "
                    "which FSDP2 needs of a group (device_mesh refuses: test_torch2.py)")
