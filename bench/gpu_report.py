#!/usr/bin/env python3
"""gpu_report.py: the Markdown section that `.ci/quickstart gpu` appends to docs/benchmarks.md,
from `mw_bench nccl --json` output (and, when given, bench_torch.py's CUDA DDP JSON).

    python3 bench/gpu_report.py NCCL.json "GPU NAME, MEMORY, DRIVER" COMMIT [DDP.json] \\
        >> docs/benchmarks.md

Each part of the JSON that is present gets its table; the targets of issue 39 are judged where
their numbers are present (PASS or MISS), never assumed.
"""
import datetime
import json
import sys


def fmt(summary, digits=2):
    return (f"{summary['median']:.{digits}f} [{summary['min']:.{digits}f}.."
            f"{summary['max']:.{digits}f}]")


def spread(summary, digits=2):
    return (f"{summary['median']:.{digits}f} [{summary['p10']:.{digits}f}.."
            f"{summary['p90']:.{digits}f}]")


def verdict(ok):
    return "PASS" if ok else "MISS"


def size_name(size):
    size = float(size)  # mw_bench writes numbers with 6 significant digits
    if size >= 0.99 * (1 << 30):
        return f"{round(size / (1 << 30))} GiB"
    if size >= 0.99 * (1 << 20):
        return f"{round(size / (1 << 20))} MiB"
    return f"{round(size / (1 << 10))} KiB"


def calls_table(x):
    lines = ["", "Per operation, all_reduce of 4 floats (us; medians [min..max] over blocks):", "",
             "| | raw NCCL | runtime | runtime - raw | target |", "|---|---|---|---|---|"]
    rl, ro, ml = x["raw_launch_us"], x["raw_ordered_launch_us"], x["runtime_launch_us"]
    lines.append(f"| launch: allReduce + wait() (stream-ordered) vs the NCCL call | {fmt(rl)} | "
                 f"{fmt(ml)} | {ml['median'] - rl['median']:+.2f} | <= +1.5: "
                 f"{verdict(ml['median'] <= rl['median'] + 1.5)} |")
    lines.append(f"| launch vs raw NCCL with c10d's ordering (2 events, 2 stream waits) | "
                 f"{fmt(ro)} | {fmt(ml)} | {ml['median'] - ro['median']:+.2f} | information |")
    if "runtime_submit_us" in x:
        ms = x["runtime_submit_us"]
        lines.append(f"| submit alone (allReduce, no wait) vs the NCCL call | {fmt(rl)} | "
                     f"{fmt(ms)} | {ms['median'] - rl['median']:+.2f} | information |")
    rw, mw = x["raw_waited_us"], x["runtime_waited_us"]
    lines.append(f"| host-waited: allReduce + synchronize() vs NCCL + event polled | {fmt(rw)} | "
                 f"{fmt(mw)} | {mw['median'] - rw['median']:+.2f} | <= +5: "
                 f"{verdict(mw['median'] <= rw['median'] + 5)} |")
    rb, mb = x["raw_back_to_back_us"], x["runtime_back_to_back_us"]
    lines.append(f"| back to back, per operation | {fmt(rb)} | {fmt(mb)} | "
                 f"{mb['median'] - rb['median']:+.2f} | <= 1.5 us: {verdict(mb['median'] <= 1.5)} |")
    lines += ["", f"Launches by the submitting thread: {x['launches_by_caller']}; by a world's "
              f"executor (thread hand-offs): {x['launches_by_executor']}."]
    return lines


def bandwidth_table(rows):
    lines = ["", "| call | size | raw NCCL, GB/s | runtime, GB/s | runtime/raw |",
             "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['kind']} | {size_name(row['size'])} | {fmt(row['raw_gbps'], 1)} | "
                     f"{fmt(row['runtime_gbps'], 1)} | {fmt(row['runtime_over_raw'], 3)} |")
    return lines


def completion_table(rows, default):
    lines = ["", "Completion: lag from the GPU finishing an all_gather (one rank: a copy of the "
             "size) to its Work completing, and the CPU of the world's threads while busy with "
             f"such operations back to back (share of one core). Default mode: {default}.", "",
             "| mode | size | operation, us | lag, us median [p10..p90] | busy CPU | "
             "lag <= 10 us and CPU <= 5% |", "|---|---|---|---|---|---|"]
    for row in rows:
        ok = row["lag_us"]["median"] <= 10 and row["busy_cpu_share"] <= 0.05
        lines.append(f"| {row['mode']} | {size_name(row['size'])} | "
                     f"{row['op_us']['median']:.1f} | {spread(row['lag_us'])} | "
                     f"{100 * row['busy_cpu_share']:.1f}% | {verdict(ok)} |")
    return lines


def mechanisms_table(rows):
    flag = any("host_flag_us" in row for row in rows)
    lines = ["", "Raw CUDA: latency from a device-to-device copy's submission to the host "
             "learning it finished (us, median [p10..p90]); lag = latency - the polled one."
             + (" Host flag: the stream writes a word of mapped host memory "
                "(cuStreamWriteValue32) that the host reads, no CUDA call." if flag else ""), "",
             "| size | polled event | blocking-sync event (lag) | host function (lag) |"
             + (" host flag (lag) |" if flag else ""),
             "|---|---|---|---|" + ("---|" if flag else "")]
    for row in rows:
        p, b, h = row["polled_us"], row["blocking_us"], row["host_function_us"]
        line = (f"| {size_name(row['size'])} | {spread(p)} | {spread(b)} "
                f"({b['median'] - p['median']:+.2f}) | {spread(h)} "
                f"({h['median'] - p['median']:+.2f}) |")
        if flag:
            q = row.get("host_flag_us")
            line += f" {spread(q)} ({q['median'] - p['median']:+.2f}) |" if q else " - |"
        lines.append(line)
    return lines


def costs_table(costs):
    lines = ["", "Each call of the launch path alone (ns per call, median [min..max]):", "",
             "| call | ns |", "|---|---|"]
    for name, x in costs.items():
        lines.append(f"| {name} | {fmt(x, 1)} |")
    return lines


def isolation_lines(x):
    b, a = x["before_ops_per_window"], x["after_ops_per_window"]
    return ["", f"Two worlds on the GPU, 1 MiB all_reduce each in its own thread; an asynchronous "
            f"ncclRemoteError injected into one: the survivor's operations per {x['window_ms']} ms "
            f"before {fmt(b, 0)}, after {fmt(a, 0)}; after/before {x['ratio']:.3f} (worst window "
            f"{x['worst_window_ratio']:.3f}), target >= 0.95: {verdict(x['ratio'] >= 0.95)}; the "
            f"victim broke {x['victim_detect_ms']:.2f} ms after the injection."]


def ddp_lines(report):
    d = report["ddp_cuda"]
    r = d["ratio"]
    return ["", f"DDP on a one-rank NCCL world against DDP on c10d's one-rank NCCL group "
            f"(`bench/python/bench_torch.py --parts ddp-cuda`, torch {d['torch']}, {d['model']}): "
            f"step time, world {d['world_ms']['median']:.3f} ms, c10d "
            f"{d['c10d_ms']['median']:.3f} ms (medians of {d['world_ms']['n']} reps); c10d/world "
            f"{r['median']:.3f} [{r['min']:.3f}..{r['max']:.3f}], target >= 0.95: "
            f"{d['verdict']}."]


def section(doc, gpu, commit, ddp=None):
    cfg = doc["config"]
    day = datetime.date.today().isoformat()
    lines = [
        "",
        f"## GPU: {gpu} ({day}, build `{commit}`, `.ci/quickstart gpu`)",
        "",
        f"`mw_bench nccl` on device {cfg['device']}: one-rank nccl worlds of the runtime against "
        f"a one-rank raw NCCL communicator, NCCL {cfg['nccl_version']} "
        f"(`{cfg['nccl_file']}`), medians [min..max] over {cfg['reps']} reps, variants "
        "alternating. One GPU cannot show isolation between processes (docs/design.md).",
    ]
    if "costs" in doc:
        lines += costs_table(doc["costs"])
    if "calls" in doc:
        lines += calls_table(doc["calls"])
    elif "overhead" in doc:  # the format before issue 39
        lines += ["", "| call (4 floats, each waited for) | raw NCCL, us | runtime, us | "
                  "runtime - raw, us |", "|---|---|---|---|"]
        for kind, x in doc["overhead"].items():
            lines.append(f"| {kind} | {fmt(x['raw_us_per_call'])} | "
                         f"{fmt(x['runtime_us_per_call'])} | {x['runtime_minus_raw_us']:+.2f} |")
    if "bandwidth" in doc:
        lines += bandwidth_table(doc["bandwidth"])
    if "completion" in doc:
        lines += completion_table(doc["completion"], cfg.get("completion_default", "?"))
    if "mechanisms" in doc:
        lines += mechanisms_table(doc["mechanisms"])
    if "isolation" in doc:
        lines += isolation_lines(doc["isolation"])
    if ddp is not None:
        lines += ddp_lines(ddp)
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        doc = json.load(f)
    ddp = None
    if len(argv) == 5:
        with open(argv[4]) as f:
            ddp = json.load(f)
    sys.stdout.write(section(doc, argv[2], argv[3], ddp))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
