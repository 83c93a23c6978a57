"""Speed and memory of `synth` on mixed 10-column tables (issue 23: the marginals mechanism).

Run as ``python -m benchmarks.marginals_speed`` (part of ``make bench``). Targets (issue 23):
20,000 x 10 mixed in <= 5 s, 10^6 x 10 in <= 60 s and <= 2 GiB, one pass over the input for the
statistics.

Tables: 3 categories (5, 7 and 8 levels), an integer, 6 floats, in Parquet, written first (not
timed). Each run is the real command, ``dpsynth synth IN --eps 1 --schema S -o OUT.parquet
--seed 0`` (auto picks marginals), in a fresh process: wall time from start to exit and the
child's peak RSS (``ru_maxrss``), with the load average beside them (the machine is shared).
Prints a markdown table. Not a unit test: timings depend on the machine and its load.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

SIZES = (20_000, 1_000_000)
LEVELS = {"cut": 5, "color": 7, "clarity": 8}


def make_table(path: str, rows: int) -> None:
    """A diamond-like mixed table: categories, a count, correlated floats."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    size = rng.lognormal(0, 0.5, rows)
    columns = {
        name: rng.integers(0, k, rows).astype(str).astype(object) for name, k in LEVELS.items()
    }
    columns["stones"] = rng.poisson(3, rows)
    for j in range(6):
        columns[f"x{j}"] = size * (1 + j) + rng.normal(0, 0.3, rows)
    pq.write_table(pa.table(columns), path)


def schema() -> dict:
    cols = {
        name: {"type": "category", "levels": [str(i) for i in range(k)]}
        for name, k in LEVELS.items()
    }
    cols["stones"] = {"type": "integer", "lower": 0, "upper": 20}
    cols.update({f"x{j}": {"type": "float", "lower": 0, "upper": 20 * (1 + j)} for j in range(6)})
    return {"columns": cols}


def run(work: str, rows: int) -> dict:
    src, out = os.path.join(work, f"in{rows}.parquet"), os.path.join(work, f"out{rows}.parquet")
    make_table(src, rows)
    schema_path = os.path.join(work, "schema.json")
    with open(schema_path, "w") as f:
        json.dump(schema(), f)
    command = [sys.executable, "-m", "dpsynth_cli", "synth", src, "--eps", "1", "--schema"]
    command += [schema_path, "-o", out, "--seed", "0", "--quiet"]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out + ".report.json") as f:
        report = json.load(f)
    return {
        "rows": rows,
        "wall_s": wall,
        "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "peak_rss_mib": after.ru_maxrss / 1024,
        "load": load,
        "mechanism": report["mechanism"]["selected_by"]["chosen"],
    }


def main() -> None:
    print("| rows x 10 | mechanism | wall s | CPU s | peak RSS MiB | load | target |")
    print("|---:|---|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory(prefix="marginals-bench-") as work:
        for rows in SIZES:
            r = run(work, rows)
            target = "5 s" if rows <= 20_000 else "60 s, 2 GiB"
            print(
                f"| {rows:,} | {r['mechanism']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                f"{r['peak_rss_mib']:.0f} | {r['load']:.1f} | {target} |"
            )


if __name__ == "__main__":
    main()
