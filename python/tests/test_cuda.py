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
