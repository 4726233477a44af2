"""Tensors reach the runtime without copies; bad tensors and bad arguments raise clearly."""

import array
import gc
import time
import weakref

import pytest
import torch

import multiworld_native as mw
from multiworld_native import _core

from conftest import LocalWorld, unique_name


@pytest.mark.parametrize("dtype,name", [
    (torch.float32, "float32"), (torch.float64, "float64"), (torch.int32, "int32"),
    (torch.int64, "int64"), (torch.float16, "float16"), (torch.bfloat16, "bfloat16"),
    (torch.uint8, "uint8")])
def test_view_is_the_tensors_memory(dtype, name):
    t = torch.zeros((4, 6), dtype=dtype)
    assert _core._tensor_info(t) == (t.data_ptr(), name, 24, "cpu")
    v = t[1:3]  # a contiguous view with a storage offset
    assert _core._tensor_info(v) == (v.data_ptr(), name, 12, "cpu")
    assert v.data_ptr() != t.data_ptr()


def test_dimensions_of_extent_one_and_empty_tensors():
    t = torch.zeros((5, 1))
    assert _core._tensor_info(t.t())[2] == 5  # (1, 5) with odd strides is still contiguous
    assert _core._tensor_info(torch.zeros(0))[2] == 0


def test_result_lands_in_the_same_tensor(world2):
    base = torch.zeros(10)
    view = base[2:6]
    ptr = view.data_ptr()

    def body(rank, comm):
        t = view if rank == 0 else torch.full((4,), 5.0)
        comm.all_reduce(world2.name, t)
        return t

    res = world2.run(body)
    assert res[0] is view and view.data_ptr() == ptr
    assert torch.equal(base[2:6], torch.full((4,), 5.0))  # written through the shared storage
    assert torch.equal(base[:2], torch.zeros(2)) and torch.equal(base[6:], torch.zeros(4))


def test_buffer_protocol_objects_work_too(world2):
    def body(rank, comm):
        a = array.array("d", [rank + 1.0] * 3)
        comm.all_reduce(world2.name, a)
        return list(a)

    assert world2.run(body) == [[3.0] * 3, [3.0] * 3]


def test_non_contiguous_is_refused_naming_the_argument(world2):
    comm, name = world2.comms[0], world2.name
    t = torch.zeros((4, 4))
    with pytest.raises(ValueError, match="'tensor' is not contiguous"):
        comm.all_reduce(name, t.t())
    with pytest.raises(ValueError, match="'tensor' is not contiguous"):
        comm.send(name, t[:, 1], 1)
    with pytest.raises(ValueError, match="'output' is not contiguous"):
        comm.all_gather(name, torch.zeros((8, 4)).t(), t)
    with pytest.raises(ValueError, match="'input' is not contiguous"):
        comm.all_to_all(name, t, torch.zeros(8)[::2])


def test_bad_dtype_and_non_tensors(world2):
    comm, name = world2.comms[0], world2.name
    for dtype in (torch.int8, torch.int16, torch.bool, torch.complex64):
        with pytest.raises(ValueError, match="argument 'tensor'.*(not supported|cannot be exp)"):
            comm.all_reduce(name, torch.zeros(4, dtype=dtype))
    g = torch.zeros(4, requires_grad=True)  # accepted as its memory (nanobind detaches it)
    assert _core._tensor_info(g)[0] == g.data_ptr()
    with pytest.raises(TypeError, match="WorldManager"):
        mw.Communicator(comm)
    with pytest.raises(TypeError, match="argument 'tensor': expected a tensor"):
        comm.all_reduce(name, [1.0, 2.0])
    with pytest.raises(TypeError):
        comm.all_reduce(name, None)


def test_bad_arguments_raise_value_error(world2):
    comm, name = world2.comms[0], world2.name
    t = torch.zeros(4)
    with pytest.raises(ValueError, match="root 7"):
        comm.broadcast(name, t, 7)
    with pytest.raises(ValueError):
        comm.send(name, t, 2)  # rank out of range for size 2
    with pytest.raises(ValueError):
        comm.isend(name, t, -1)
    with pytest.raises(ValueError, match="tag"):
        comm.isend(name, t, 1, tag=-1)
    with pytest.raises(ValueError, match="tag"):
        comm.isend(name, t, 1, tag=2**31)
    with pytest.raises(ValueError, match="op must be"):
        comm.all_reduce(name, t, op="avg")
    with pytest.raises(ValueError):  # 5 elements cannot be 2 blocks of 4
        comm.all_gather(name, torch.zeros(5), t)
    with pytest.raises(ValueError):  # dtypes must agree
        comm.all_gather(name, torch.zeros(8, dtype=torch.float64), t)
    # The world is still healthy and usable after all of these.
    world2.run(lambda r, c: c.barrier(name))
    assert [w.state for w in world2.managers[0].worlds()] == ["healthy"]


def test_unknown_world_and_bad_world_options():
    m = mw.WorldManager()
    c = mw.Communicator(m)
    with pytest.raises(mw.MultiworldError) as e:
        c.all_reduce("nope", torch.zeros(1))
    assert e.value.code == "not_found" and "nope" in str(e.value)
    with pytest.raises(mw.MultiworldError) as e:
        m.remove_world("nope")
    assert e.value.code == "not_found"
    with pytest.raises(ValueError):
        m.initialize_world("bad name!", 0, 1)
    with pytest.raises(ValueError):
        m.initialize_world(unique_name(), 1, 1)  # rank >= size
    with pytest.raises(ValueError):
        m.initialize_world(unique_name(), 0, 1, backend="mpi")
    with pytest.raises(ValueError):
        m.initialize_world(unique_name(), 0, 1, heartbeat_timeout=0.001)
    with pytest.raises(ValueError):
        m.initialize_world(unique_name(), 0, 1, port=70000)
    with pytest.raises(ValueError):
        m.initialize_world(unique_name(), 0, 1, device="tpu:0")
    name = unique_name()
    m.initialize_world(name, 0, 1)
    with pytest.raises(mw.MultiworldError) as e:
        m.initialize_world(name, 0, 1)
    assert e.value.code == "invalid_usage"
    info = m.world(name)
    assert (info.name, info.rank, info.size, info.state, info.generation, info.backend,
            info.device, info.broken) == (name, 0, 1, "healthy", 1, "gloo", "cpu", None)
    m.remove_world(name)
    assert m.worlds() == []


def test_dropped_work_keeps_its_tensor_alive(world2):
    name = world2.name
    t = torch.zeros(1000)
    ref = weakref.ref(t)
    work = world2.comms[1].irecv(name, t, 0, tag=5)
    del t, work
    gc.collect()
    assert ref() is not None and _core._parked_count() >= 1
    world2.comms[0].send(name, torch.full((1000,), 2.0), 1, tag=5)
    # The send completes when its data left; nobody can wait for the dropped receive, so look.
    deadline = time.monotonic() + 10
    while not torch.equal(ref(), torch.full((1000,), 2.0)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert torch.equal(ref(), torch.full((1000,), 2.0))  # the receive landed in the tensor
    while time.monotonic() < deadline:  # later submissions prune the parked list
        world2.run(lambda r, c: c.barrier(name))
        gc.collect()
        if ref() is None:
            break
        time.sleep(0.01)
    assert ref() is None and _core._parked_count() == 0


def test_world_info_and_generation():
    w = LocalWorld(2)
    try:
        infos = [m.worlds() for m in w.managers]
        assert [[(i.name, i.rank, i.size, i.state, i.generation) for i in ws] for ws in infos] == \
            [[(w.name, 0, 2, "healthy", 1)], [(w.name, 1, 2, "healthy", 1)]]
        assert infos[0][0].store_port == w.port
    finally:
        w.close()
