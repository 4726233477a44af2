"""A world as a torch.distributed process group (multiworld_native.torch): every dist.* call
with group=pg against torch's own result, Work semantics, and a broken world's error."""

import os
import threading
import time

import pytest
import torch
import torch.distributed as dist

import multiworld_native as mw
from multiworld_native import torch as mwtorch

from conftest import LocalWorld, run_threads

SIZE = 3


@pytest.fixture(scope="module")
def groups():
    w = LocalWorld(SIZE)
    pgs = [mwtorch.process_group(m, w.name) for m in w.managers]
    yield w, pgs
    for pg in pgs:
        pg.close()
    w.close()


def each(groups, fn):
    _, pgs = groups
    return run_threads([lambda r=r: fn(r, pgs[r]) for r in range(SIZE)])


def inp(rank, n=4, dtype=torch.float32):
    return (torch.arange(n, dtype=torch.float64) + 10 * rank + 1).to(dtype)


def test_rank_size_and_name(groups):
    w, pgs = groups
    assert [pg.rank() for pg in pgs] == list(range(SIZE))
    assert all(pg.size() == SIZE and dist.get_world_size(pg) == SIZE for pg in pgs)
    assert pgs[0].world == w.name and pgs[0].getBackendName() == "multiworld"
    assert isinstance(pgs[0], dist.ProcessGroup)


@pytest.mark.parametrize("op,ref", [(dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.PRODUCT, "prod"),
                                    (dist.ReduceOp.MIN, "min"), (dist.ReduceOp.MAX, "max")])
def test_all_reduce(groups, op, ref):
    s = torch.stack([inp(r, dtype=torch.float64) for r in range(SIZE)])
    want = {"sum": s.sum(0), "prod": s.prod(0), "min": s.min(0).values,
            "max": s.max(0).values}[ref]

    def body(r, pg):
        t = inp(r, dtype=torch.float64)
        assert dist.all_reduce(t, op=op, group=pg) is None
        return t

    for got in each(groups, body):
        assert torch.equal(got, want)


def test_avg_is_a_sum_divided_by_the_size_and_wants_floats(groups):
    def body(r, pg):
        t = inp(r, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.AVG, group=pg)
        out = torch.zeros(2, dtype=torch.float64)
        dist.reduce_scatter(out, [inp(r, 2, torch.float64) * (j + 1) for j in range(SIZE)],
                            op=dist.ReduceOp.AVG, group=pg)
        return t, out

    mean = sum(inp(r, dtype=torch.float64) for r in range(SIZE)) / SIZE
    for r, (t, out) in enumerate(each(groups, body)):
        assert torch.allclose(t, mean)
        assert torch.allclose(out, sum(inp(q, 2, torch.float64) for q in range(SIZE))
                              * (r + 1) / SIZE)
    _, pgs = groups
    with pytest.raises(ValueError, match="AVG needs floating-point"):
        dist.all_reduce(torch.ones(2, dtype=torch.int64), op=dist.ReduceOp.AVG, group=pgs[0])


def test_an_unsupported_reduce_op_is_refused(groups):
    _, pgs = groups
    with pytest.raises(ValueError, match="reduce op .* is not supported"):
        dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND, group=pgs[0])


def test_broadcast_and_reduce_are_rooted_at_group_ranks(groups):
    def body(r, pg):
        b = inp(r)
        dist.broadcast(b, src=1, group=pg)
        t = inp(r)
        dist.reduce(t, dst=2, op=dist.ReduceOp.SUM, group=pg)
        return b, t

    got = each(groups, body)
    for b, _ in got:
        assert torch.equal(b, inp(1))
    assert torch.equal(got[2][1], sum(inp(r) for r in range(SIZE)))


def test_all_gather_both_forms(groups):
    def body(r, pg):
        outs = [torch.zeros(4) for _ in range(SIZE)]
        dist.all_gather(outs, inp(r), group=pg)
        flat = torch.zeros(SIZE * 4)
        dist._all_gather_base(flat, inp(r), group=pg)
        return outs, flat

    want = [inp(r) for r in range(SIZE)]
    for outs, flat in each(groups, body):
        assert all(torch.equal(o, w) for o, w in zip(outs, want))
        assert torch.equal(flat, torch.cat(want))


def test_reduce_scatter(groups):
    def body(r, pg):
        out = torch.zeros(4)
        dist.reduce_scatter(out, [inp(r) * (j + 1) for j in range(SIZE)], group=pg)
        return out

    total = sum(inp(r) for r in range(SIZE))
    for r, got in enumerate(each(groups, body)):
        assert torch.equal(got, total * (r + 1))


def test_all_to_all_both_forms(groups):
    def body(r, pg):
        outs = [torch.zeros(2) for _ in range(SIZE)]
        dist.all_to_all(outs, [torch.full((2,), 10.0 * r + j) for j in range(SIZE)], group=pg)
        single = torch.zeros(SIZE)
        dist.all_to_all_single(single, torch.arange(SIZE, dtype=torch.float32) + 10 * r,
                               group=pg)
        return outs, single

    for r, (outs, single) in enumerate(each(groups, body)):
        for j, o in enumerate(outs):
            assert torch.equal(o, torch.full((2,), 10.0 * j + r))
        assert torch.equal(single, torch.tensor([10.0 * j + r for j in range(SIZE)]))


def test_uneven_all_to_all_single_is_refused(groups):
    _, pgs = groups
    with pytest.raises(ValueError, match="split sizes is not supported"):
        dist.all_to_all_single(torch.zeros(3), torch.zeros(3), output_split_sizes=[1, 1, 1],
                               input_split_sizes=[1, 1, 1], group=pgs[0])


def test_send_recv_and_barrier(groups):
    def body(r, pg):
        got = None
        if r == 0:
            dist.send(inp(0), dst=2, group=pg, tag=5)
        elif r == 2:
            got = torch.zeros(4)
            dist.recv(got, src=0, group=pg, tag=5)
        dist.barrier(group=pg)
        return got

    assert torch.equal(each(groups, body)[2], inp(0))


def test_async_work_completes_its_future_without_wait(groups):
    def body(r, pg):
        t = inp(r)
        work = dist.all_reduce(t, group=pg, async_op=True)
        fut = work.get_future()
        done = threading.Event()
        fut.then(lambda f: done.set())
        assert done.wait(20), "the future never completed"
        assert work.is_completed() and work.is_success() and work.exception() is None
        assert work.wait() is True
        return t

    total = sum(inp(r) for r in range(SIZE))
    for got in each(groups, body):
        assert torch.equal(got, total)


def test_a_broken_world_raises_from_wait_and_never_hangs():
    w = LocalWorld(2, heartbeat_timeout=0.3)
    pgs = [mwtorch.process_group(m, w.name) for m in w.managers]
    try:
        t = torch.zeros(4)
        work = pgs[0].recv([t], 1, 9)
        w.managers[1].close()  # the peer leaves: the world breaks at rank 0
        with pytest.raises(mw.BrokenWorldError) as e:
            work.wait()
        assert e.value.world == w.name and e.value.cause
        assert not work.is_success() and isinstance(work.exception(), mw.BrokenWorldError)
        with pytest.raises(mw.BrokenWorldError):
            dist.all_reduce(torch.ones(2), group=pgs[0])
    finally:
        for pg in pgs:
            pg.close()
        w.close()


def test_an_unknown_world_is_refused():
    m = mw.WorldManager()
    try:
        with pytest.raises((ValueError, mw.MultiworldError)):
            mwtorch.process_group(m, "nope")
    finally:
        m.close()


def test_closed_groups_leave_torch_rank_map_and_threads_flat():
    base_threads = threading.active_count()
    base_fds = len(os.listdir("/proc/self/fd"))
    ranks = dist.distributed_c10d._pg_group_ranks
    before = len(ranks)
    for _ in range(10):
        w = LocalWorld(2)
        pgs = [mwtorch.process_group(m, w.name) for m in w.managers]
        run_threads([lambda pg=pg: dist.all_reduce(torch.ones(8), group=pg) for pg in pgs])
        for pg in pgs:
            pg.close()
        w.close()
    assert len(ranks) == before
    # The waiter threads are a pool of at most 64, made once; the worlds' own threads are gone.
    assert threading.active_count() <= base_threads + 64
    assert len(os.listdir("/proc/self/fd")) <= base_fds + 8



def test_the_rank_map_is_the_one_torch_reads():
    """_rank_map() is the one private structure touched: torch's own group-rank map of this
    version (1.13: distributed_c10d._pg_group_ranks; 2.x: _world.pg_group_ranks)."""
    c10d = dist.distributed_c10d
    world = getattr(c10d, "_world", None)
    want = world.pg_group_ranks if world is not None and hasattr(world, "pg_group_ranks") \
        else c10d._pg_group_ranks
    assert mwtorch._rank_map() is want
    w = LocalWorld(2)
    pg = mwtorch.process_group(w.managers[0], w.name, global_ranks=[5, 9])
    try:
        assert mwtorch._rank_map()[pg] == {5: 0, 9: 1}
        assert dist.get_group_rank(pg, 9) == 1 and dist.get_global_rank(pg, 0) == 5
        assert dist.get_process_group_ranks(pg) == [5, 9]
    finally:
        pg.close()
        w.close()
    assert pg not in mwtorch._rank_map()


def test_rooted_calls_take_the_given_global_ranks():
    w = LocalWorld(2)
    pgs = [mwtorch.process_group(m, w.name, global_ranks=[4, 2]) for m in w.managers]
    try:
        def body(r):
            t = inp(r)
            dist.broadcast(t, src=2, group=pgs[r])  # global 2 is world rank 1
            return t
        assert all(torch.equal(t, inp(1)) for t in run_threads([lambda r=r: body(r)
                                                                 for r in range(2)]))
    finally:
        for pg in pgs:
            pg.close()
        w.close()


@pytest.mark.parametrize("bad", [[0], [0, 0], [0, -1], [0, 1.5], [0, 1, 2]])
def test_bad_global_ranks_are_refused(bad):
    w = LocalWorld(2)
    try:
        with pytest.raises(ValueError, match="global_ranks must hold 2 distinct"):
            mwtorch.process_group(w.managers[0], w.name, global_ranks=bad)
    finally:
        w.close()


def test_one_work_waited_from_several_threads_completes_once(groups):
    """wait(), is_completed() and get_future() of one Work from four threads at once: each sees
    the result, the gathered copies are made once."""
    def body(r, pg):
        outs = [torch.zeros(4) for _ in range(SIZE)]
        work = dist.all_gather(outs, inp(r), group=pg, async_op=True)
        seen = run_threads([work.wait, work.wait, lambda: work.get_future().wait(),
                            lambda: work.is_completed() or work.wait()])
        assert seen[0] is True and seen[1] is True and seen[3] is True
        assert work.is_completed() and work.exception() is None
        return outs

    want = [inp(r) for r in range(SIZE)]
    for outs in each(groups, body):
        assert all(torch.equal(o, w) for o, w in zip(outs, want))


def test_works_are_let_go_when_done_and_waited_and_unclaimed_ones_later(monkeypatch):
    """The registry that keeps a Work alive for torch's C++ callers (module docstring, "Versions"
    in docs/python.md) holds nothing once works are waited on, however many; one never waited
    on is let go _UNCLAIMED_S after it completed."""
    m = mw.WorldManager()
    try:
        m.initialize_world("solo-live", 0, 1, timeout=30)
        pg = mwtorch.process_group(m, "solo-live")
        for _ in range(2000):
            dist.all_reduce(torch.ones(2), group=pg)
        assert len(mwtorch._live) == 0 and len(mwtorch._live._unclaimed) == 0
        dist.all_reduce(torch.ones(2), group=pg, async_op=True).get_future().wait()
        deadline = time.monotonic() + 10  # its waiter thread lets it go after the future
        while len(mwtorch._live) > 0:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert len(mwtorch._live._unclaimed) == 0
        monkeypatch.setattr(mwtorch, "_UNCLAIMED_S", 0.0)
        work = dist.all_reduce(torch.ones(2), group=pg, async_op=True)
        deadline = time.monotonic() + 20
        while not work.is_completed():  # completes it without consuming it
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert len(mwtorch._live) == 1
        dist.all_reduce(torch.ones(2), group=pg)  # a new Work: the unclaimed one is let go
        assert len(mwtorch._live) == 0
        assert work.wait() is True  # Python still holds it: it works as before
        pg.close()
    finally:
        m.close()
