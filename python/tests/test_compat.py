"""The compatibility module for the original MultiWorld API (multiworld_native.compat): its
coroutines on 2 ranks (threads, each with its own event loop), a broken world, and the ported
leader example with a worker killed (test_examples.py runs that one)."""
import asyncio
import threading

import pytest
import torch
import torch.distributed as dist

from multiworld_native import BrokenWorldError
from multiworld_native.compat import BrokenWorldException, WorldManager

from conftest import run_threads, unique_name


def n_ranks(size, body, timeout=30):
    """Runs the coroutine body(rank, manager, world) for ranks 0..size-1 of one new world, each on
    a thread with its own event loop and manager; returns their results in rank order."""
    world = unique_name("compat")
    port = {}
    ready = threading.Event()

    async def rank_main(r):
        m = WorldManager()
        if r == 0:
            joined = asyncio.create_task(m.initialize_world(world, 0, size, port=-1))
            await asyncio.sleep(0)
            port["p"] = await asyncio.get_running_loop().run_in_executor(
                None, m.store_port, world)
            ready.set()
            await joined
        else:
            ready.wait(10)
            await m.initialize_world(world, r, size, port=port["p"])
        try:
            return await body(r, m, world)
        finally:
            m._native.close()

    return run_threads([lambda r=r: asyncio.run(rank_main(r)) for r in range(size)], timeout)


def two_ranks(body, timeout=30):
    """n_ranks with two ranks."""
    return n_ranks(2, body, timeout)


def test_every_coroutine_matches_torch():
    async def body(r, m, world):
        c = m.communicator
        out = {}
        t = torch.tensor([float(r + 1)] * 3)
        if r == 0:
            await c.send(t, 1, world)
        else:
            got = torch.zeros(3)
            await c.recv(got, 0, world)
            out["recv"] = got.tolist()
        b = torch.tensor([5.0, 6.0]) if r == 1 else torch.zeros(2)
        await c.broadcast(b, 1, world)
        out["broadcast"] = b.tolist()
        for op, expect in ((dist.ReduceOp.SUM, 3.0), (dist.ReduceOp.PRODUCT, 2.0),
                           (dist.ReduceOp.MIN, 1.0), (dist.ReduceOp.MAX, 2.0)):
            a = torch.tensor([float(r + 1)])
            await c.all_reduce(a, op=op, world_name=world)
            assert a.item() == expect
        red = torch.tensor([float(r + 1)])
        await c.reduce(red, 0, dist.ReduceOp.SUM, world)
        if r == 0:
            out["reduce"] = red.item()
        parts = [torch.zeros(2) for _ in range(2)]
        await c.all_gather(parts, torch.tensor([float(r), float(r)]), world)
        out["all_gather"] = [p.tolist() for p in parts]
        glist = [torch.zeros(1) for _ in range(2)] if r == 0 else None
        await c.gather(torch.tensor([float(10 + r)]), glist, 0, world)
        if r == 0:
            out["gather"] = [g.item() for g in glist]
        s = torch.zeros(2)
        slist = [torch.tensor([1.0, 1.0]), torch.tensor([2.0, 2.0])] if r == 0 else None
        await c.scatter(s, slist, 0, world)
        out["scatter"] = s.tolist()
        return out

    r0, r1 = two_ranks(body)
    assert r1["recv"] == [1.0, 1.0, 1.0]
    assert r0["broadcast"] == r1["broadcast"] == [5.0, 6.0]
    assert r0["reduce"] == 3.0
    assert r0["all_gather"] == r1["all_gather"] == [[0.0, 0.0], [1.0, 1.0]]
    assert r0["gather"] == [10.0, 11.0]
    assert r0["scatter"] == [1.0, 1.0] and r1["scatter"] == [2.0, 2.0]


def test_a_world_left_by_its_peer_raises_broken_world_exception_and_frees_the_name():
    async def body(r, m, world):
        c = m.communicator
        if r == 1:
            m.remove_world(world)  # the peer leaves
            assert c.is_broken(world)
            return None
        with pytest.raises(BrokenWorldException) as info:
            await c.recv(torch.zeros(1), 1, world)
        # Raised before the world's removal, which follows on the event loop: the caller hears
        # of the break as soon as the runtime knows (the removal used to come first).
        states = {w.name: w.state for w in m._native.worlds()}
        assert states.get(world) == "broken", states
        await asyncio.sleep(0)
        assert world not in {w.name for w in m._native.worlds()}
        e = info.value
        assert isinstance(e, BrokenWorldError)
        assert e.world == world and e.cause in ("peer_left", "peer_died")
        assert str(e).startswith(f"{world} broken: ")
        assert c.is_broken(world)
        # The name is free again (the original could not reuse it).
        await m.initialize_world(world, 0, 1)
        assert not c.is_broken(world)
        return e.cause

    cause, _ = two_ranks(body)
    assert cause in ("peer_left", "peer_died")


def test_unsupported_reduce_op_is_a_value_error():
    async def body(r, m, world):
        if r == 0:
            with pytest.raises(ValueError):
                await m.communicator.all_reduce(torch.ones(1), op=dist.ReduceOp.BAND,
                                                world_name=world)
        return None

    two_ranks(body)


def test_a_broken_world_raised_and_reinitialized_at_once_is_removed_first():
    """The deferred removal of a broken world never removes the next world of that name."""
    async def body(r, m, world):
        c = m.communicator
        if r == 1:
            m.remove_world(world)
            return None
        with pytest.raises(BrokenWorldException):
            await c.recv(torch.zeros(1), 1, world)
        await m.initialize_world(world, 0, 1)  # before the loop ran the removal
        await asyncio.sleep(0)                 # the removal's turn: nothing left to remove
        await asyncio.sleep(0)
        t = torch.ones(2)
        await c.all_reduce(t, world_name=world)  # the new generation works
        assert not c.is_broken(world)
        return t.tolist()

    got, _ = two_ranks(body)
    assert got == [1.0, 1.0]


@pytest.mark.parametrize("size", range(2, 9))
def test_members_that_leave_as_soon_as_they_joined_fail_no_join(size):
    """The join contract (docs/design.md): no member's join returns before every member's
    connections are up, so members that leave the instant their own join returned fail no other
    member's join; the stayers' world breaks with peer_left. Every member, rank 0 alone, or the
    last rank alone leaves, 10 cycles per size."""
    for cycle in range(10):
        pattern = cycle % 3
        leaves = [pattern == 0 or (pattern == 1 and r == 0) or (pattern == 2 and r == size - 1)
                  for r in range(size)]

        async def member(r, m, world):
            if leaves[r]:
                m.remove_world(world)
                return "left"
            for _ in range(5000):  # the store's notice of the leaver arrives at once
                if m._native.world(world).state == "broken":
                    break
                await asyncio.sleep(0.001)
            info = m._native.world(world)
            return (info.state, info.broken["cause"] if info.broken else None)

        got = n_ranks(size, member, 60)
        for r in range(size):
            if not leaves[r]:
                assert got[r] == ("broken", "peer_left"), (size, cycle, r, got[r])
