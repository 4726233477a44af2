#!/usr/bin/env python3
"""gpu_report.py: the Markdown section that `.ci/quickstart gpu` appends to docs/benchmarks.md,
from `mw_bench nccl --json` output.

    python3 bench/gpu_report.py NCCL.json "GPU NAME, MEMORY, DRIVER" COMMIT >> docs/benchmarks.md
"""
import datetime
import json
import sys


def fmt(summary, digits=2):
    return (f"{summary['median']:.{digits}f} [{summary['min']:.{digits}f}.."
            f"{summary['max']:.{digits}f}]")


def section(doc, gpu, commit):
    cfg = doc["config"]
    day = datetime.date.today().isoformat()
    lines = [
        "",
        f"## GPU: {gpu} ({day}, build `{commit}`, `.ci/quickstart gpu`)",
        "",
        f"`mw_bench nccl` on device {cfg['device']}: a one-rank nccl world of the runtime against "
        f"a one-rank raw NCCL communicator, NCCL {cfg['nccl_version']} "
        f"(`{cfg['nccl_file']}`), medians [min..max] over {cfg['reps']} reps, variants "
        "alternating. One GPU cannot show isolation between processes (docs/design.md).",
        "",
        "| call (4 floats, each waited for) | raw NCCL, us | runtime, us | runtime - raw, us |",
        "|---|---|---|---|",
    ]
    for kind, x in doc["overhead"].items():
        lines.append(f"| {kind} | {fmt(x['raw_us_per_call'])} | {fmt(x['runtime_us_per_call'])} | "
                     f"{x['runtime_minus_raw_us']:+.2f} |")
    lines += ["", "| call | size | raw NCCL, GB/s | runtime, GB/s | runtime/raw |",
              "|---|---|---|---|---|"]
    for row in doc["bandwidth"]:
        size = row["size"]
        name = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        lines.append(f"| {row['kind']} | {name} | {fmt(row['raw_gbps'], 1)} | "
                     f"{fmt(row['runtime_gbps'], 1)} | {fmt(row['runtime_over_raw'], 3)} |")
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        doc = json.load(f)
    sys.stdout.write(section(doc, argv[2], argv[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
