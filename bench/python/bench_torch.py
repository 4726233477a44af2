#!/usr/bin/env python3
"""bench_torch.py: a world as a torch.distributed process group (multiworld_native.torch)
against c10d's own Gloo group and against the binding's own calls, side by side in one run.

    python bench/python/bench_torch.py [--steps 10] [--reps 25] [--calls 5000] [--blocks 5]
                                       [--width 512] [--json PATH] [--strict]

Two parts, each judged on medians over repetitions that alternate the variants' order:

ddp      Two processes (this one is rank 0; a peer runs this script with --role peer), one
         2-member world and one c10d ProcessGroupGloo between them (a TCPStore). The same model
         (an MLP of four --width x --width layers) is wrapped in DistributedDataParallel twice,
         over each group; per repetition each trains --steps steps, the order alternating. Step
         time = rank 0's wall time / steps. Target: Gloo's step time / the world's >= 1.0.
fsdp     As ddp, with FSDP2 (torch 2.x): the same MLP with each Linear and the root sharded by
         fully_shard, over a DeviceMesh of the world's group (multiworld_native.torch.
         device_mesh) and over one of c10d's Gloo default group (init_process_group, same
         TCPStore). Not in the default parts. Target (issue 36): Gloo's step time / the
         world's >= 0.95.
layer    One process, a one-member world: dist.all_reduce(t, group=pg) (4 floats, blocking)
         against comm.all_reduce on the same world, --calls calls per block, the order
         alternating. The torch layer's cost per call = the difference (what a Work, its torch
         future and the waiter thread add). No target: it is reported.
ddp-cuda One process, one GPU (not in the default parts; exit 3 without a CUDA GPU): the same
         model (--cuda-width, --cuda-batch) on cuda:0 wrapped in DistributedDataParallel over a
         one-rank nccl world and over c10d's one-rank NCCL group; per repetition each trains
         --steps steps, the order alternating. Target (issue 39): c10d's step time / the
         world's >= 0.95.

Exit status: 0 ran (no target missed, or --strict not given); 1 a target was missed with
--strict; 2 bad arguments; 3 the benchmark itself failed (the peer died, a world broke).
"""

import argparse
import inspect
import random
import statistics
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import multiworld_native as mw
from multiworld_native import torch as mwtorch

# The statistics and the report's ending are bench_python.py's (this script's folder is on
# sys.path when it runs).
from bench_python import finish, judge, median_ci, spread


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 2)[2])
    p.add_argument("--steps", type=int, default=10, help="DDP steps per variant and repetition")
    p.add_argument("--reps", type=int, default=25, help="DDP repetitions per variant")
    p.add_argument("--width", type=int, default=512, help="the MLP's layer width")
    p.add_argument("--batch", type=int, default=8, help="the batch per rank")
    p.add_argument("--threads", type=int, default=1,
                   help="torch's intra-op threads per process (default 1: two processes share "
                        "the machine)")
    p.add_argument("--calls", type=int, default=5000, help="calls per layer block")
    p.add_argument("--blocks", type=int, default=5, help="layer blocks")
    p.add_argument("--parts", default="ddp,layer",
                   help="parts to run (ddp, fsdp, layer, ddp-cuda)")
    p.add_argument("--cuda-width", type=int, default=2048, help="ddp-cuda: the MLP's width")
    p.add_argument("--cuda-batch", type=int, default=256, help="ddp-cuda: the batch")
    p.add_argument("--json", help="write samples, medians and verdicts here")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--role", default="main", choices=("main", "peer"), help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--store-port", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.parts = [x.strip() for x in a.parts.split(",") if x.strip()]
    for part in a.parts:
        if part not in ("ddp", "fsdp", "layer", "ddp-cuda"):
            p.error(f"unknown part '{part}' in --parts")
    for name in ("steps", "reps", "width", "batch", "calls", "blocks", "threads", "cuda_width",
                 "cuda_batch"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return a


# ---- ddp ------------------------------------------------------------------------------------

def model(width):
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def step_times(args, nets, opts, x, warm_up, sync=lambda: None):
    """Milliseconds per training step of each of the two DDP models in `nets` ({variant: DDP}),
    --steps steps per repetition, --reps repetitions, the order alternating; `sync` ends each
    block (the GPU's work included)."""
    variants = list(nets)

    def steps(v, n):
        for _ in range(n):
            opts[v].zero_grad()
            nets[v](x).square().mean().backward()
            opts[v].step()
        sync()

    for v in variants:  # warm up both (buckets are rebuilt after the first step)
        steps(v, warm_up)
    times = {v: [] for v in variants}
    for rep in range(args.reps):
        for v in (variants if rep % 2 == 0 else variants[::-1]):
            t0 = time.perf_counter()
            steps(v, args.steps)
            times[v].append((time.perf_counter() - t0) / args.steps * 1e3)
    return times


def sharded(mesh, width):
    """model(width) with FSDP2: each Linear sharded on its own, then the root."""
    from torch.distributed.fsdp import fully_shard

    net = model(width)
    for m in net:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m, mesh=mesh)
    return fully_shard(net, mesh=mesh)


def pair_body(args, kind, manager, world, store, rank):
    """Both ranks: the same schedule of (rep, variant) blocks; rank 0's step times by variant.
    kind "ddp": DDP over the world's group and over a c10d Gloo group; "fsdp": FSDP2 over a mesh
    of the world's group and over a mesh of c10d's Gloo default group."""
    torch.set_num_threads(args.threads)
    pg = mwtorch.process_group(manager, world)
    if kind == "ddp":
        nets = {"world": DDP(model(args.width), process_group=pg),
                "gloo": DDP(model(args.width), process_group=mwtorch.gloo_group(store, rank, 2))}
    else:
        from torch.distributed.device_mesh import init_device_mesh

        dist.init_process_group("gloo", store=dist.PrefixStore("fsdp/", store), rank=rank,
                                world_size=2)
        nets = {"world": sharded(mwtorch.device_mesh(pg, "cpu"), args.width),
                "gloo": sharded(init_device_mesh("cpu", (2,)), args.width)}
    opts = {v: torch.optim.SGD(n.parameters(), lr=1e-3) for v, n in nets.items()}
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.width, generator=gen)

    times = step_times(args, nets, opts, x, warm_up=3)
    pg.close()
    if dist.is_initialized():
        dist.destroy_process_group()
    return times


def peer(args):
    manager = mw.WorldManager()
    manager.initialize_world("pair", 1, 2, port=args.port, timeout=30)
    store = dist.TCPStore("127.0.0.1", args.store_port, 2, False, timedelta(seconds=60))
    pair_body(args, args.parts[0], manager, "pair", store, 1)
    manager.close()
    return 0


def ddp(args, report, rng, kind="ddp"):
    """kind "ddp" or "fsdp": rank 0's paired step times, world against Gloo, into report."""
    manager = mw.WorldManager()
    join = manager.initialize_world("pair", 0, 2, port=0, timeout=30, async_op=True)
    port = manager.store_port("pair", 10)
    store = dist.TCPStore("127.0.0.1", 0, 2, True, timedelta(seconds=60), wait_for_workers=False)
    argv = [sys.executable, __file__, "--role", "peer", "--port", str(port), "--store-port",
            str(store.port), "--parts", kind] + [f"--{k}={getattr(args, k)}"
                                                 for k in ("steps", "reps", "width", "batch",
                                                           "threads")]
    peer_proc = subprocess.Popen(argv)
    try:
        if not join.wait(30):
            raise RuntimeError("the peer never joined")
        times = pair_body(args, kind, manager, "pair", store, 0)
        if peer_proc.wait(60) != 0:
            raise RuntimeError(f"the peer exited with {peer_proc.returncode}")
    finally:
        if peer_proc.poll() is None:
            peer_proc.kill()
        manager.close()
    ratios = [g / w for g, w in zip(times["gloo"], times["world"])]
    med = statistics.median(ratios)
    ci = median_ci(ratios, rng)
    target = 1.0 if kind == "ddp" else 0.95
    verdict = judge(med, ci, target)
    params = sum(p.numel() for p in model(args.width).parameters())
    w, g = spread(times["world"]), spread(times["gloo"])
    print(f"\n{kind}: 2 processes, MLP of {params} parameters, batch {args.batch}, "
          f"{args.steps} steps x {args.reps} reps per variant, step time (ms) median [min..max]")
    print(f"  world {w['median']:8.3f} [{w['min']:.3f}..{w['max']:.3f}]")
    print(f"  gloo  {g['median']:8.3f} [{g['min']:.3f}..{g['max']:.3f}]")
    print(f"  gloo/world {med:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] (95% CI), target >= {target}: "
          f"{verdict}")
    report[kind] = {"params": params, "world_ms": times["world"], "gloo_ms": times["gloo"],
                     "ratio": ratios, "summary": {"world_ms": w, "gloo_ms": g, "ratio": med,
                                                  "ci": ci, "verdict": verdict}}
    return verdict != "MISS"


# ---- layer ----------------------------------------------------------------------------------

def layer(args, report):
    manager = mw.WorldManager()
    manager.initialize_world("solo", 0, 1, timeout=30)
    comm = mw.Communicator(manager)
    pg = mwtorch.process_group(manager, "solo")
    t = torch.zeros(4)
    calls = {"dist": lambda: dist.all_reduce(t, group=pg),
             "comm": lambda: comm.all_reduce("solo", t)}
    for call in calls.values():
        for _ in range(100):
            call()
    us = {v: [] for v in calls}
    for block in range(args.blocks):
        for v in (("dist", "comm") if block % 2 == 0 else ("comm", "dist")):
            t0 = time.perf_counter()
            for _ in range(args.calls):
                calls[v]()
            us[v].append((time.perf_counter() - t0) / args.calls * 1e6)
    pg.close()
    manager.close()
    cost = [d - c for d, c in zip(us["dist"], us["comm"])]
    d, c, k = spread(us["dist"]), spread(us["comm"]), spread(cost)
    print(f"\nlayer: one-member world, all_reduce of 4 floats, {args.calls} calls x "
          f"{args.blocks} blocks, per call (us) median [min..max]")
    print(f"  dist.all_reduce(group=pg) {d['median']:8.2f} [{d['min']:.2f}..{d['max']:.2f}]")
    print(f"  comm.all_reduce           {c['median']:8.2f} [{c['min']:.2f}..{c['max']:.2f}]")
    print(f"  the torch layer           {k['median']:8.2f} [{k['min']:.2f}..{k['max']:.2f}]")
    report["layer"] = {"dist_us": us["dist"], "comm_us": us["comm"], "layer_us": cost,
                       "summary": {"dist_us": d, "comm_us": c, "layer_us": k}}
    return True


# ---- ddp-cuda -------------------------------------------------------------------------------

def ddp_cuda(args, report, rng):
    if not torch.cuda.is_available():
        raise RuntimeError("ddp-cuda needs a CUDA GPU, and torch sees none")
    if not mw.WITH_NCCL:
        raise RuntimeError("ddp-cuda needs a multiworld_native built with the NCCL backend")
    manager = mw.WorldManager()
    manager.initialize_world("ddp-cuda", 0, 1, backend="nccl", device="cuda:0", timeout=60)
    extra = {}
    if "device_id" in inspect.signature(dist.init_process_group).parameters:  # torch >= 2.3
        extra["device_id"] = torch.device("cuda", 0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, **extra)
    groups = {"world": mwtorch.process_group(manager, "ddp-cuda"), "c10d": None}
    nets = {}
    for v, g in groups.items():
        net = model(args.cuda_width).cuda()
        nets[v] = DDP(net, process_group=g) if g is not None else DDP(net)
    opts = {v: torch.optim.SGD(n.parameters(), lr=1e-4) for v, n in nets.items()}
    x = torch.randn(args.cuda_batch, args.cuda_width, device="cuda",
                    generator=torch.Generator(device="cuda").manual_seed(0))

    times = step_times(args, nets, opts, x, warm_up=5, sync=torch.cuda.synchronize)
    groups["world"].close()
    dist.destroy_process_group()
    manager.close()
    ratios = [c / w for c, w in zip(times["c10d"], times["world"])]
    med = statistics.median(ratios)
    ci = median_ci(ratios, rng)
    verdict = judge(med, ci, 0.95)
    params = sum(p.numel() for p in model(args.cuda_width).parameters())
    w, c = spread(times["world"]), spread(times["c10d"])
    r = spread(ratios)
    print(f"\nddp-cuda: one process, {torch.cuda.get_device_name(0)}, MLP of {params} "
          f"parameters, batch {args.cuda_batch}, {args.steps} steps x {args.reps} reps per "
          "variant, step time (ms) median [min..max]")
    print(f"  world {w['median']:8.3f} [{w['min']:.3f}..{w['max']:.3f}]")
    print(f"  c10d  {c['median']:8.3f} [{c['min']:.3f}..{c['max']:.3f}]")
    print(f"  c10d/world {med:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] (95% CI), target >= 0.95: "
          f"{verdict}")
    report["ddp_cuda"] = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
                          "model": f"MLP of {params} parameters, batch {args.cuda_batch}",
                          "world_ms": w, "c10d_ms": c, "ratio": r, "ratio_ci": ci,
                          "samples": {"world_ms": times["world"], "c10d_ms": times["c10d"]},
                          "verdict": verdict}
    return verdict != "MISS"


def main(argv):
    args = parse_args(argv)
    if args.role == "peer":
        return peer(args)
    report = {"python": sys.version.split()[0], "torch": torch.__version__,
              "multiworld_native": mw.__version__,
              "args": {k: v for k, v in vars(args).items() if k not in ("role", "port",
                                                                        "store_port")}}
    passed = []
    try:
        if "ddp" in args.parts:
            passed.append(ddp(args, report, random.Random(1)))
        if "fsdp" in args.parts:
            passed.append(ddp(args, report, random.Random(3), "fsdp"))
        if "layer" in args.parts:
            passed.append(layer(args, report))
        if "ddp-cuda" in args.parts:
            passed.append(ddp_cuda(args, report, random.Random(2)))
    except (RuntimeError, mw.MultiworldError, TimeoutError) as e:
        print(f"bench_torch: {e}", file=sys.stderr)
        return 3
    return finish(args, report, passed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
