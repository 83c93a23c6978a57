"""Speed and memory of online-replay on 10^6 rows, d = 2, eps = 1, releases at powers of two.

Run as ``python -m benchmarks.online_speed`` (part of ``make bench`` once the Makefile calls it).
Targets (issue): total <= 20 s, peak memory <= 2 GiB.

What is timed, in a fresh child process per repeat: a Parquet file of 10^6 rows (columns time, x,
y; clustered values, sorted by time) opened as the command does (``stream.open_stream``: one pass
over the time column, "read s"; the rows are then read batch by batch while they are replayed),
``online.replay`` with ``--order-by time``, ``--state`` (the secret state written at the end) and
Parquet releases at 1, 2, 4, ..., 2^19 (20 files, 1,048,575 rows in all), plus the report. Peak
memory: the child's ``ru_maxrss``. Also a per-stage breakdown.
Then the same run through the real command line (``dpsynth online-replay ... --quiet``), timed
from process start to exit. Prints markdown tables. Not a unit test: timings depend on the
machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROWS = 1_000_000


def make_input(path: str, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    centres = rng.random((5, 2))
    x = np.clip(centres[rng.integers(0, 5, rows)] + 0.05 * rng.standard_normal((rows, 2)), 0, 1)
    pq.write_table(pa.table({"time": np.arange(rows), "x": x[:, 0], "y": x[:, 1]}), path)


def child(path: str, allocation: str) -> dict:
    """One timed run (called in a fresh process)."""
    t0 = time.perf_counter()
    from dpsynth_cli.domain import ColumnSpec
    from dpsynth_cli.io import open_input
    from dpsynth_cli.online.replay import ReplayOptions, replay
    from dpsynth_cli.online.stream import open_stream
    from dpsynth_cli.privacy.noise import RandomSource

    t_import = time.perf_counter()
    specs = [ColumnSpec("x", "float", 0.0, 1.0), ColumnSpec("y", "float", 0.0, 1.0)]
    work = tempfile.mkdtemp(prefix="online-bench-")
    out = os.path.join(work, "out")
    os.mkdir(out)
    opts = ReplayOptions(1.0, order_by="time", allocation=allocation)
    with open_input(path, "parquet", ["time", "x", "y"]) as source:
        rows = open_stream(source, specs, "time")  # the pass over the time column
        assert not rows.sorted_in_memory
        t_read = time.perf_counter()
        res = replay(
            rows,
            specs,
            opts,
            RandomSource.secure(),
            out_dir=out,
            state_dir=os.path.join(work, "state"),
        )
    t_end = time.perf_counter()
    state_mb = os.path.getsize(os.path.join(work, "state", "state.npz")) / 2**20
    return {
        "total_s": t_end - t0,
        "import_s": t_import - t0,
        "read_s": t_read - t_import,
        "replay_s": t_end - t_read,
        "releases": len(res.report["checkpoints"]),
        "rows_released": sum(c["rows"] for c in res.report["checkpoints"]),
        "state_mib": state_mb,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def cli_run(path: str) -> dict:
    """The real command, wall time and peak memory (ru_maxrss) of its process."""
    work = tempfile.mkdtemp(prefix="online-bench-cli-")
    cmd = [sys.executable, "-m", "dpsynth_cli", "online-replay", path, "--eps", "1"]
    cmd += ["--order-by", "time", "--bounds", "x=0:1", "--bounds", "y=0:1", "--quiet"]
    cmd += ["--out-dir", os.path.join(work, "out"), "--state", os.path.join(work, "state")]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"the command failed: {' '.join(cmd)}")
    return {"total_s": time.perf_counter() - start, "peak_mib": usage.ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows", type=int, default=ROWS)
    ap.add_argument("--allocation", default="tuned", choices=["tuned", "literal"])
    ap.add_argument("--child", nargs=2, metavar=("PATH", "ALLOCATION"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    path = os.path.join(tempfile.mkdtemp(prefix="online-bench-in-"), "stream.parquet")
    make_input(path, args.rows)
    runs = []
    for _ in range(args.repeats):
        cmd = [sys.executable, "-m", "benchmarks.online_speed", "--child", path, args.allocation]
        runs.append(
            json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        )
    print(
        f"online-replay, {args.rows} rows, d = 2, eps = 1, powers of two, --state, "
        f"--allocation {args.allocation}, {args.repeats} runs (each in a fresh process)\n"
    )
    print(
        "| run | total s | import s | read s | replay s | releases | rows released | "
        "state MiB | peak MiB |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, r in enumerate(runs, 1):
        print(
            f"| {i} | {r['total_s']:.1f} | {r['import_s']:.2f} | {r['read_s']:.2f} | "
            f"{r['replay_s']:.1f} | {r['releases']} | {r['rows_released']} | "
            f"{r['state_mib']:.0f} | {r['peak_mib']:.0f} |"
        )
    best = min(r["total_s"] for r in runs)
    peak = max(r["peak_mib"] for r in runs)
    print(f"\nbest total {best:.1f} s (target <= 20 s), peak {peak:.0f} MiB (target <= 2048)")
    if args.allocation == "tuned":  # the command's default
        cli = [cli_run(path) for _ in range(args.repeats)]
        print(
            "\n`dpsynth online-replay` (the real command, default flags), process start to exit:\n"
        )
        print("| run | total s | peak MiB |\n| ---: | ---: | ---: |")
        for i, r in enumerate(cli, 1):
            print(f"| {i} | {r['total_s']:.1f} | {r['peak_mib']:.0f} |")
    print(f"\nload average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
