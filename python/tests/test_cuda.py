"""CUDA tensors (skipped where torch sees no GPU, the only skips of the suite)."""

import time

import pytest
import torch

import multiworld_native as mw
from multiworld_native import _core

from conftest import unique_name

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
needs_nccl = [needs_gpu, pytest.mark.skipif(not mw.WITH_NCCL,
                                            reason="library built without the NCCL backend")]

# torch.cuda._sleep cycles: about a quarter of a second on a 2 GHz GPU, long past any launch.
SLEEP = int(5e8)
# What "returned without waiting for the GPU" means here: far under the sleep.
QUICK = 0.1


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


def test_cuda_wait_must_be_stream_or_host():
    m = mw.WorldManager()
    with pytest.raises(ValueError, match="cuda_wait 'sometimes'"):
        m.initialize_world(unique_name("bad_wait"), 0, 1, cuda_wait="sometimes", timeout=30)
    m.close()


@pytest.mark.parametrize("blocking", [False, True])
@needs_nccl[0]
@needs_nccl[1]
def test_wait_orders_the_current_stream_and_host_wait_blocks(blocking):
    """On an nccl world wait() (and a blocking call) makes torch's current stream wait for the
    operation and returns without waiting for the GPU; wait(host=True) waits for the GPU."""
    m = mw.WorldManager()
    name = unique_name("streamed")
    m.initialize_world(name, 0, 1, backend="nccl", device="cuda:0", timeout=60)
    c = mw.Communicator(m)
    n = 1 << 18
    src = torch.zeros(n, device="cuda:0")
    out = torch.zeros(n, device="cuda:0")
    side = torch.cuda.Stream(device="cuda:0")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP)
        src.fill_(7.0)
        t0 = time.monotonic()
        if blocking:
            work = None
            c.all_gather(name, out, src)
        else:
            work = c.all_gather(name, out, src, async_op=True)
            assert work.wait(timeout=60)
        waited = time.monotonic() - t0
        seen = out.clone()  # queued on `side` after the operation
        if work is not None:
            assert not work.is_completed()  # the GPU still sleeps
    assert waited < QUICK
    if work is not None:
        assert work.wait(host=True)
        assert work.is_completed()
    torch.cuda.synchronize()
    assert torch.equal(seen.cpu(), torch.full((n,), 7.0))
    m.close()


@needs_nccl[0]
@needs_nccl[1]
def test_a_host_waited_world_waits_for_the_gpu():
    m = mw.WorldManager()
    name = unique_name("hosted")
    m.initialize_world(name, 0, 1, backend="nccl", device="cuda:0", timeout=60, cuda_wait="host")
    c = mw.Communicator(m)
    t = torch.zeros(1024, device="cuda:0")
    side = torch.cuda.Stream(device="cuda:0")
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP)
        work = c.all_reduce(name, t, async_op=True)
        assert work.wait(timeout=60)
        assert work.is_completed()
    m.close()


@needs_nccl[0]
@needs_nccl[1]
def test_process_group_on_cuda_is_stream_ordered_with_copy_outs_on_its_stream():
    """dist.* on a world's group with CUDA tensors: wait() and the CUDA-aware future order the
    caller's stream, the copy-outs (all_gather's list, gather, all_to_all) are ordered after the
    operation; the host never waits for the GPU."""
    import torch.distributed as dist
    from multiworld_native import torch as mwtorch

    m = mw.WorldManager()
    name = unique_name("pg_cuda")
    m.initialize_world(name, 0, 1, backend="nccl", device="cuda:0", timeout=60)
    pg = mwtorch.process_group(m, name)
    side = torch.cuda.Stream(device="cuda:0")
    t = torch.zeros(1 << 18, device="cuda:0")

    def run(sleep):
        """The calls, timed: (work, doubled, seen, host seconds after each call)."""
        with torch.cuda.stream(side):
            torch.cuda._sleep(sleep)
            t.fill_(3.0)
            t0 = time.monotonic()
            work = dist.all_reduce(t, group=pg, async_op=True)
            took = [time.monotonic() - t0]
            fut = work.get_future()
            took.append(time.monotonic() - t0)
            assert work.wait()
            took.append(time.monotonic() - t0)
            doubled = fut.then(lambda f: f.value()[0] * 2).wait()
            took.append(time.monotonic() - t0)
            seen = t.clone()
            return work, doubled, seen, took

    run(1000)  # every kernel and stream used once (CUDA loads kernels lazily)
    torch.cuda.synchronize()
    work, doubled, seen, took = run(SLEEP)
    done_at_once = work.is_completed()
    times = ", ".join(f"{x * 1e3:.2f}" for x in took)
    assert not done_at_once, f"complete while the GPU sleeps (host ms after each call: {times})"
    assert took[-1] < QUICK, times
    torch.cuda.synchronize()
    until = time.monotonic() + 10  # the world's completer marks it within microseconds
    while not work.is_completed() and time.monotonic() < until:
        time.sleep(0.001)
    assert work.is_completed() and work.exception() is None
    assert torch.equal(seen.cpu(), torch.full_like(seen, 3.0).cpu())
    assert torch.equal(doubled.cpu(), torch.full_like(seen, 6.0).cpu())
    for kind in ("all_gather", "gather", "all_to_all"):
        outs = [torch.zeros(4096, device="cuda:0")]
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP)
            x = torch.full((4096,), 5.0, device="cuda:0")
            if kind == "all_gather":
                dist.all_gather(outs, x, group=pg)
            elif kind == "gather":  # the group's own call (torch's dist.gather differs by version)
                opts = dist.GatherOptions()
                opts.rootRank = 0
                assert pg.gather([outs], [x], opts).wait()
            else:
                dist.all_to_all(outs, [x], group=pg)
            copy = outs[0].clone()
        torch.cuda.synchronize()
        assert torch.equal(copy.cpu(), torch.full((4096,), 5.0)), kind
    pg.close()
    m.close()


@needs_nccl[0]
@needs_nccl[1]
def test_ddp_on_a_cuda_world_matches_the_model_trained_alone():
    import torch.distributed as dist  # noqa: F401 - DDP needs it
    from torch.nn.parallel import DistributedDataParallel as DDP

    from multiworld_native import torch as mwtorch

    m = mw.WorldManager()
    name = unique_name("ddp_cuda")
    m.initialize_world(name, 0, 1, backend="nccl", device="cuda:0", timeout=60)
    pg = mwtorch.process_group(m, name)
    gen = torch.Generator().manual_seed(3)
    ref = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    for p in ref.parameters():
        p.data = torch.randn(p.shape, generator=gen)
    ref = ref.cuda()
    net = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                  torch.nn.Linear(64, 8)).cuda(), process_group=pg)
    net.module.load_state_dict(ref.state_dict())
    opts = [torch.optim.SGD(ref.parameters(), lr=0.1), torch.optim.SGD(net.parameters(), lr=0.1)]
    x = torch.randn(32, 64, generator=gen).cuda()
    for _ in range(3):
        for model, opt in zip((ref, net), opts):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    torch.cuda.synchronize()
    for a, b in zip(ref.parameters(), net.module.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    pg.close()
    m.close()
