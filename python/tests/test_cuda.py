"""CUDA tensors (skipped where torch sees no GPU, the only skips of the suite)."""

import pytest
import torch

import multiworld_native as mw
from multiworld_native import _core

from conftest import unique_name

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


@needs_gpu
def test_cuda_tensor_view_is_zero_copy():
    t = torch.zeros(8, device="cuda:0")
    assert _core._tensor_info(t) == (t.data_ptr(), "float32", 8, "cuda:0")


@needs_gpu
@pytest.mark.skipif(not mw.WITH_NCCL, reason="library built without the NCCL backend")
def test_nccl_world_of_one():
    m = mw.WorldManager()
    name = unique_name("nccl")
    m.initialize_world(name, 0, 1, backend="nccl", device="cuda:0", timeout=60)
    c = mw.Communicator(m)
    t = torch.arange(8, dtype=torch.float32, device="cuda:0")
    c.all_reduce(name, t)
    torch.cuda.synchronize()
    assert torch.equal(t.cpu(), torch.arange(8, dtype=torch.float32))
    with pytest.raises(ValueError):  # a CPU tensor in a CUDA world
        c.all_reduce(name, torch.zeros(8))
    m.close()


def test_stream_argument_is_checked_on_cpu():
    """stream= orders operations on CUDA tensors: CPU tensors refuse one, a bad type is named."""
    m = mw.WorldManager()
    name = unique_name("cpu_stream")
    m.initialize_world(name, 0, 1, timeout=30)
    c = mw.Communicator(m)
    t = torch.ones(4)
    with pytest.raises(ValueError, match="argument 'stream': operations on CPU tensors"):
        c.all_reduce(name, t, stream=0)
    with pytest.raises(ValueError, match="argument 'stream'"):
        c.isend(name, t, 0, stream=1234)
    with pytest.raises(TypeError, match="argument 'stream': expected None, a torch.cuda.Stream"):
        c.broadcast(name, t, 0, stream="default")
    with pytest.raises(TypeError, match="argument 'stream'"):
        c.all_gather(name, torch.zeros(4), t, stream=True)
    c.all_reduce(name, t, stream=None)  # None: nothing to order for CPU tensors
    assert torch.equal(t, torch.ones(4))
    m.close()


@needs_gpu
@pytest.mark.skipif(not mw.WITH_NCCL, reason="library built without the NCCL backend")
def test_cuda_operations_are_ordered_after_the_callers_stream():
    """The input written late on the caller's stream is what the operation reads, for stream=
    given and for torch's current stream, without the host waiting for the stream."""
    m = mw.WorldManager()
    name = unique_name("nccl_stream")
    m.initialize_world(name, 0, 1, backend="nccl", device="cuda:0", timeout=60)
    c = mw.Communicator(m)
    n = 1 << 18
    src = torch.zeros(n, device="cuda:0")
    out = torch.zeros(n, device="cuda:0")
    side = torch.cuda.Stream(device="cuda:0")
    torch.cuda.synchronize()
    for value, explicit in ((3.0, True), (5.0, False)):
        with torch.cuda.stream(side):
            torch.cuda._sleep(int(5e8))  # a long kernel before the write
            src.fill_(value)
            if explicit:
                work = c.all_gather(name, out, src, async_op=True, stream=side)
            else:  # torch's current stream, here `side`
                work = c.all_gather(name, out, src, async_op=True)
        assert not work.is_completed()
        assert work.wait(timeout=60)
        assert torch.equal(out.cpu(), torch.full((n,), value))
    m.close()
