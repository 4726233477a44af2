"""Every operation on every dtype, checked against torch's own computation of the result."""

import pytest
import torch

import multiworld_native as mw

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.uint8]
OPS = ["sum", "prod", "min", "max"]
SHAPE = (3, 5)


def ids(dtypes):
    return [str(d).replace("torch.", "") for d in dtypes]


def rank_input(rank, dtype, shape=SHAPE, seed=0):
    """Small integers (1..3), exact in every dtype and for products of 3 ranks."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randint(1, 4, shape, generator=g).to(dtype)


def wide(t):
    return t.to(torch.float64 if t.is_floating_point() else torch.int64)


def reference(op, tensors):
    """torch's reduction of `tensors`, computed in a wide type and cast back."""
    s = torch.stack([wide(t) for t in tensors])
    r = {"sum": lambda: s.sum(0), "prod": lambda: s.prod(0), "min": lambda: s.min(0).values,
         "max": lambda: s.max(0).values}[op]()
    return r.to(tensors[0].dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("size", [2, 3])
def test_all_reduce(request, size, op, dtype):
    world = request.getfixturevalue(f"world{size}")
    inputs = [rank_input(r, dtype, seed=1) for r in range(size)]
    want = reference(op, inputs)

    def body(rank, comm):
        t = inputs[rank].clone()
        assert comm.all_reduce(world.name, t, op=op) is None
        return t

    for got in world.run(body):
        assert got.dtype == dtype and torch.equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("op", OPS)
def test_reduce(world3, op, dtype):
    inputs = [rank_input(r, dtype, seed=2) for r in range(3)]

    def body(rank, comm):
        t = inputs[rank].clone()
        comm.reduce(world3.name, t, 1, op=op)
        return t

    assert torch.equal(world3.run(body)[1], reference(op, inputs))


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_broadcast(world3, dtype):
    inputs = [rank_input(r, dtype, seed=3) for r in range(3)]

    def body(rank, comm):
        t = inputs[rank].clone()
        comm.broadcast(world3.name, t, 2)
        return t

    for got in world3.run(body):
        assert torch.equal(got, inputs[2])


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_all_gather(world3, dtype):
    inputs = [rank_input(r, dtype, seed=4) for r in range(3)]

    def body(rank, comm):
        out = torch.empty((3 * SHAPE[0], SHAPE[1]), dtype=dtype)
        comm.all_gather(world3.name, out, inputs[rank])
        return out

    for got in world3.run(body):
        assert torch.equal(got, torch.cat(inputs))


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_gather(world3, dtype):
    inputs = [rank_input(r, dtype, seed=5) for r in range(3)]

    def body(rank, comm):
        out = torch.empty((3 * SHAPE[0], SHAPE[1]), dtype=dtype) if rank == 1 else None
        comm.gather(world3.name, out, inputs[rank], 1)
        return out

    assert torch.equal(world3.run(body)[1], torch.cat(inputs))


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_scatter(world3, dtype):
    full = rank_input(0, dtype, shape=(3 * SHAPE[0], SHAPE[1]), seed=6)

    def body(rank, comm):
        out = torch.zeros(SHAPE, dtype=dtype)
        comm.scatter(world3.name, out, full if rank == 0 else None, 0)
        return out

    for rank, got in enumerate(world3.run(body)):
        assert torch.equal(got, full.chunk(3)[rank])


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("op", OPS)
def test_reduce_scatter(world3, op, dtype):
    inputs = [rank_input(r, dtype, shape=(3 * SHAPE[0], SHAPE[1]), seed=7) for r in range(3)]
    want = reference(op, inputs).chunk(3)

    def body(rank, comm):
        out = torch.zeros(SHAPE, dtype=dtype)
        comm.reduce_scatter(world3.name, out, inputs[rank], op=op)
        return out

    for rank, got in enumerate(world3.run(body)):
        assert torch.equal(got, want[rank])


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_all_to_all(world3, dtype):
    inputs = [rank_input(r, dtype, shape=(3 * SHAPE[0], SHAPE[1]), seed=8) for r in range(3)]

    def body(rank, comm):
        out = torch.zeros((3 * SHAPE[0], SHAPE[1]), dtype=dtype)
        comm.all_to_all(world3.name, out, inputs[rank])
        return out

    for j, got in enumerate(world3.run(body)):
        want = torch.cat([inputs[i].chunk(3)[j] for i in range(3)])
        assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_send_recv(world2, dtype):
    data = rank_input(0, dtype, seed=9)

    def body(rank, comm):
        if rank == 0:
            comm.send(world2.name, data, 1)
            return None
        t = torch.zeros(SHAPE, dtype=dtype)
        comm.recv(world2.name, t, 0)
        return t

    assert torch.equal(world2.run(body)[1], data)


def test_isend_irecv_match_by_tag(world3):
    a, b = torch.full((4,), 7.0), torch.full((4,), 3.0)

    def body(rank, comm):
        if rank == 0:
            works = [comm.isend(world3.name, a, 2, tag=7), comm.isend(world3.name, b, 2, tag=3)]
            return [w.wait(10) for w in works]
        if rank == 2:
            x, y = torch.zeros(4), torch.zeros(4)
            w3 = comm.irecv(world3.name, y, 0, tag=3)  # posted in the other order
            w7 = comm.irecv(world3.name, x, 0, tag=7)
            assert w3.wait(10) and w7.wait(10)
            return x, y
        return None

    res = world3.run(body)
    assert res[0] == [True, True]
    assert torch.equal(res[2][0], a) and torch.equal(res[2][1], b)


def test_send_recv_async_op_ring(world3):
    def body(rank, comm):
        out = torch.full((8,), float(rank), dtype=torch.float64)
        into = torch.zeros(8, dtype=torch.float64)
        ws = comm.send(world3.name, out, (rank + 1) % 3, tag=1, async_op=True)
        wr = comm.recv(world3.name, into, (rank + 2) % 3, tag=1, async_op=True)
        assert isinstance(ws, mw.Work) and isinstance(wr, mw.Work)
        assert wr.wait(10) and ws.wait(10)
        return into

    for rank, got in enumerate(world3.run(body)):
        assert torch.equal(got, torch.full((8,), float((rank + 2) % 3), dtype=torch.float64))


def test_barrier_and_async_collectives(world3):
    def body(rank, comm):
        comm.barrier(world3.name)
        t = torch.ones(16, dtype=torch.int64) * (rank + 1)
        w1 = comm.all_reduce(world3.name, t, async_op=True)
        w2 = comm.barrier(world3.name, async_op=True)
        assert w1.wait(10) is True and w2.wait(10) is True
        assert w1.is_completed() and w1.exception() is None
        return t

    for got in world3.run(body):
        assert torch.equal(got, torch.full((16,), 6, dtype=torch.int64))


def test_wait_any(world2):
    def body(rank, comm):
        if rank == 0:
            comm.send(world2.name, torch.ones(2), 1, tag=2)
            comm.send(world2.name, torch.ones(2), 1, tag=1)
            return None
        a, b = torch.zeros(2), torch.zeros(2)
        works = [comm.irecv(world2.name, a, 0, tag=1), comm.irecv(world2.name, b, 0, tag=2)]
        first = mw.wait_any(works, timeout=10)
        assert works[first].is_completed()
        for w in works:
            w.wait(10)
        return first

    assert world2.run(body)[1] in (0, 1)


def test_wait_any_errors(world2):
    with pytest.raises(ValueError):
        mw.wait_any([])
    t = torch.zeros(1)
    w = world2.comms[0].irecv(world2.name, t, 1, tag=99)
    with pytest.raises(TimeoutError):
        mw.wait_any([w], timeout=0.1)
    world2.comms[1].send(world2.name, torch.ones(1), 0, tag=99)
    assert mw.wait_any([w], timeout=10) == 0 and t.item() == 1.0
