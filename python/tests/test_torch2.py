"""torch 2.x: a world's group is a c10d group like torch's own (the torch 2.x adapter,
multiworld_native/_torch2.py). Ranks are threads of this process, each with its own manager.
Skipped, saying so, under torch 1.x (test_torch_pg.py runs the rest under both). Under a 2.x
whose c10d lets no Python class be a Backend (2.11; the gate runs this file so under 2.15 too,
with MW_TEST_TORCH_NO_PY_BACKEND=1) the group runs its operations itself: what needs a Backend
(the functional collectives, DeviceMesh, FSDP2) is refused, and the rest holds as with one."""

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.distributed as dist

from multiworld_native import torch as mwtorch

from conftest import LocalWorld, run_threads

if mwtorch._adapter.GENERATION != 2:
    pytest.skip(f"torch {torch.__version__} is not 2.x: the 2.x adapter is not in use",
                allow_module_level=True)

import torch.distributed._functional_collectives as fc  # noqa: E402

C = torch._C._distributed_c10d
SIZE = 2
# Whether a world's group holds a Python Backend (torch 2.15) or runs its operations itself.
HOLDS = mwtorch._GROUP_HOLDS_BACKEND
registered = mwtorch._adapter._registered


@pytest.fixture
def groups():
    w = LocalWorld(SIZE)
    pgs = [mwtorch.process_group(m, w.name, global_ranks=[7, 3]) for m in w.managers]
    yield w, pgs
    for pg in pgs:
        pg.close()
    w.close()


def each(pgs, fn):
    return run_threads([lambda r=r: fn(r, pgs[r]) for r in range(len(pgs))])


def test_a_group_has_a_name_and_is_in_torch_maps_and_registry(groups):
    w, pgs = groups
    names = [pg.group_name for pg in pgs]
    # Both "ranks" live in this process: the second group of the world gets "#2".
    assert names == [f"multiworld:{w.name}", f"multiworld:{w.name}#2"]
    for pg, name in zip(pgs, names):
        assert pg.group_desc == name
        assert C._resolve_process_group(name) is pg
        assert dist.get_backend(pg) == "multiworld"
        assert dist.distributed_c10d._world.pg_names[pg] == name
        assert dist.get_process_group_ranks(pg) == [7, 3]
        assert dist.get_group_rank(pg, 3) == 1 and dist.get_global_rank(pg, 0) == 7
        assert sorted(d.type for d in pg._device_types) == (["cpu", "cuda"] if HOLDS else [])
        assert dist.get_world_size(pg) == SIZE


def test_close_takes_the_group_out_of_maps_and_registry(groups):
    _, pgs = groups
    name = pgs[0].group_name
    pgs[0].close()
    pgs[0].close()  # idempotent
    w = dist.distributed_c10d._world
    assert pgs[0] not in w.pg_map and pgs[0] not in w.pg_group_ranks
    assert pgs[0] not in w.pg_names and pgs[0] not in w.pg_to_tag
    assert not registered(name)


def test_destroy_process_group_takes_a_group_out_and_leaves_the_world(groups):
    w, pgs = groups
    name = pgs[1].group_name
    dist.destroy_process_group(pgs[1])
    assert pgs[1] not in dist.distributed_c10d._world.pg_map
    assert not registered(name)
    assert w.managers[1].world(w.name).state == "healthy"  # a world given to process_group stays


def test_the_collectives_torch_2_dispatches(groups):
    _, pgs = groups

    def body(r, pg):
        x = torch.arange(4.0) + 10 * r
        out = torch.empty(8)
        dist.all_gather_into_tensor(out, x, group=pg)
        rs = torch.empty(2)
        dist.reduce_scatter_tensor(rs, x, group=pg)
        ata = torch.empty(4)
        dist.all_to_all_single(ata, x, group=pg)
        return out, rs, ata

    got = each(pgs, body)
    for r, (out, rs, ata) in enumerate(got):
        assert out.tolist() == [0, 1, 2, 3, 10, 11, 12, 13]
        assert rs.tolist() == ([10.0, 12.0] if r == 0 else [14.0, 16.0])
        assert ata.tolist() == ([0, 1, 10, 11] if r == 0 else [2, 3, 12, 13])


def test_the_functional_collectives_run_on_a_world(groups):
    _, pgs = groups
    if not HOLDS:
        # Which functional collectives reach a group without a Backend is torch's choice (2.11:
        # all_reduce does, all_gather_tensor is refused: docs/python.md); a mesh is refused.
        with pytest.raises(mwtorch.MultiworldError, match="lets no Python class be a c10d "
                           "Backend") as e:
            mwtorch.device_mesh(pgs[0], "cpu")
        assert e.value.code == "unsupported" and torch.__version__ in str(e.value)
        return

    def body(r, pg):
        a = fc.all_reduce(torch.full((2,), float(r + 1)), "sum", pg)
        g = fc.all_gather_tensor(torch.full((2,), float(r)), 0, pg)
        s = fc.reduce_scatter_tensor(torch.arange(4.0), "sum", 0, pg)
        byname = fc.all_reduce(torch.ones(1), "sum", pg.group_name)
        return [torch.as_tensor(v).tolist() for v in (a, g, s, byname)]

    for r, (a, g, s, byname) in enumerate(each(pgs, body)):
        assert a == [3.0, 3.0] and g == [0.0, 0.0, 1.0, 1.0] and byname == [2.0]
        assert s == ([0.0, 2.0] if r == 0 else [4.0, 6.0])


def test_a_work_from_cxx_callers_completes(groups):
    """Called through torch's C++ (the group's C++ method, as DDP and FSDP do), the Work is
    torch's holder of ours: wait() and get_future() reach our Work."""
    _, pgs = groups

    def body(r, pg):
        t = torch.full((2,), float(r + 1))
        work = C.ProcessGroup.allreduce(pg, [t])
        assert work.wait() is True
        t2 = torch.ones(2)
        fut = C.ProcessGroup.allreduce(pg, [t2]).get_future()
        return t.tolist(), fut.wait()[0].tolist()

    for t, f in each(pgs, body):
        assert t == [3.0, 3.0] and f == [2.0, 2.0]


def test_register_declares_its_devices():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mwtorch.register()
    assert set(dist.Backend.backend_capability["multiworld"]) == {"cpu", "cuda"}


def test_the_gloo_baseline_is_a_group_torch_accepts():
    store = dist.HashStore()
    pgs = run_threads([lambda r=r: mwtorch.gloo_group(store, r, 2) for r in range(2)])

    def body(r):
        t = torch.full((2,), float(r + 1))
        pgs[r].allreduce([t]).wait()
        return t.tolist()

    assert run_threads([lambda r=r: body(r) for r in range(2)]) == [[3.0, 3.0]] * 2


def test_the_active_ddp_attribute_is_the_one_torch_sets_in_a_forward():
    """The adapter's forget_active_ddp lets go of ``DistributedDataParallel._active_ddp_module``:
    that is the attribute torch sets to the DDP whose forward runs (and puts back after it)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    w = LocalWorld(1)
    pg = mwtorch.process_group(w.managers[0], w.name)
    seen = []

    class Probe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x):
            seen.append(getattr(DDP, "_active_ddp_module", "absent"))
            return self.lin(x)

    try:
        ddp = DDP(Probe(), process_group=pg)
        before = getattr(DDP, "_active_ddp_module", "absent")
        ddp(torch.ones(1, 2)).sum().backward()
        assert seen == [ddp], "torch no longer keeps the running DDP in _active_ddp_module"
        assert getattr(DDP, "_active_ddp_module", "absent") is before
        DDP._active_ddp_module = ddp  # what overlapping forwards in two threads can leave
        assert mwtorch._adapter.forget_active_ddp() is True
        assert DDP._active_ddp_module is None
        assert mwtorch._adapter.forget_active_ddp() is False
    finally:
        DDP._active_ddp_module = None
        pg.close()
        w.close()


def test_many_groups_from_several_threads_get_distinct_names():
    ws = [LocalWorld(1) for _ in range(4)]
    try:
        made = run_threads([lambda w=w: [mwtorch.process_group(w.managers[0], w.name)
                                         for _ in range(5)] for w in ws])
        names = [pg.group_name for pgs in made for pg in pgs]
        assert len(set(names)) == 20
        for pgs in made:
            for pg in pgs:
                pg.close()
        assert not any(registered(n) for n in names)
    finally:
        for w in ws:
            w.close()


def _fsdp(tmp_path, mode):
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fsdp_worker.py")
    init = tmp_path / f"init-{mode}"
    outs = [tmp_path / f"{mode}-{r}.json" for r in range(2)]
    procs = [subprocess.Popen([sys.executable, worker, str(r), str(init), mode, str(outs[r])],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    try:
        for p in procs:
            out, _ = p.communicate(timeout=180)
            assert p.returncode == 0, f"{mode}: {out[-3000:]}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [json.loads(o.read_text()) for o in outs]


_BASELINE = {}


@pytest.mark.parametrize("mode", ["register", "from_group", "mesh"])
def test_fsdp2_on_a_mesh_of_worlds_matches_fsdp2_on_gloo(tmp_path, mode):
    """FSDP2 (fully_shard) over a DeviceMesh whose group is a world, 10 steps, against the same
    run over c10d Gloo: parameters equal within 1e-6 (a sum of two numbers is the same in either
    order, so in practice bit for bit)."""
    if not HOLDS:
        pytest.skip(f"torch {torch.__version__}: its c10d lets no Python class be a Backend, "
                    "which FSDP2 needs of a group (device_mesh's refusal: "
                    "test_the_functional_collectives_run_on_a_world)")
    if "gloo" not in _BASELINE:  # the same run for every mode: made once
        _BASELINE["gloo"] = _fsdp(tmp_path, "gloo")
    want = _BASELINE["gloo"]
    got = _fsdp(tmp_path, mode)
    assert got[0] == got[1]  # full parameters agree across the ranks
    for g, w in zip(got[0], want[0]):
        assert len(g) == len(w)
        assert max(abs(a - b) for a, b in zip(g, w)) <= 1e-6
