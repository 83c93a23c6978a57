"""Tables larger than memory (issue 11): ``make bench-scale``.

Run as ``python -m benchmarks.scale`` (``--help`` for options). The data are generated into
``--dir`` (default benchmarks/out/scale, not committed) and reused when present.

Cells (targets from the issue):

* ``parquet-2``: 10^8 rows x 2 columns, Parquet to Parquet, eps 1: peak RSS <= 1.5 GiB and wall
  time <= 2 x the baseline;
* ``csv-2``: the same for a 10^7-row CSV (CSV to CSV);
* ``parquet-30``: 10^7 x 30 Parquet with ``--dim auto``: bounded memory;
* ``dask``: the 10^8-row file with ``--engine dask`` (LocalCluster, 2 workers) next to local;
* ``evaluate``: ``dpsynth evaluate`` of a 10^7 x 2 Parquet file against its synthetic table
  (made first, not timed): memory bounded by a batch and the streamed statistics;
* ``evaluate-diamonds``: ``dpsynth evaluate`` of diamonds resampled to 10^6 x 10 against its
  synthetic table, alternating with the baseline ``--runs`` times: <= 10 x the baseline's wall
  time and <= 1 GiB (`benchmarks.scale_evaluate`).

The baseline is what pyarrow alone needs to read the file batch by batch and write a file of the
same size and format (the same batches back), in a fresh process. Every command runs in a fresh
process; wall time and the peak RSS of the process tree (``/usr/bin/time -v`` when present, else
``getrusage(RUSAGE_CHILDREN)``, which counts the largest child) are reported. Not a unit test.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from benchmarks import scale_evaluate

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 2_000_000


def wide_columns(rng: np.random.Generator, m: int, d: int) -> dict[str, np.ndarray]:
    """A smooth correlated table in [0, 100]^d (a 2-D latent mixture, noisy, clipped)."""
    z = rng.normal(size=(m, 2)) * np.where(rng.random((m, 1)) < 0.6, 1.0, 0.4)
    mix = np.random.default_rng(7).normal(size=(2, d))
    x = 50 + 12 * (z @ mix) / np.sqrt(2) + rng.normal(scale=3.0, size=(m, d))
    return {f"c{j}": np.clip(x[:, j], 0, 100) for j in range(d)}


def generate(path: Path, rows: int, d: int, fmt: str) -> None:
    if path.exists():
        return
    rng = np.random.default_rng(20261123)
    tmp = path.with_suffix(path.suffix + ".part")
    writer = None
    with open(tmp, "wb") as fh:
        for lo in range(0, rows, CHUNK):
            table = pa.table(wide_columns(rng, min(CHUNK, rows - lo), d))
            if fmt == "parquet":
                writer = writer or pq.ParquetWriter(fh, table.schema)
                writer.write_table(table, row_group_size=1 << 20)
            else:
                opts = pacsv.WriteOptions(include_header=lo == 0)
                pacsv.write_csv(table, fh, opts)
        if writer is not None:
            writer.close()
    tmp.rename(path)


BASELINE = """
import sys, pyarrow as pa, pyarrow.parquet as pq, pyarrow.csv as pacsv
src, dst, fmt = sys.argv[1:4]
if fmt == "parquet":
    f = pq.ParquetFile(src, pre_buffer=False)
    with pq.ParquetWriter(dst, f.schema_arrow) as w:
        for b in f.iter_batches(batch_size=1 << 20):
            w.write_batch(b)
else:
    r = pacsv.open_csv(src)
    with pacsv.CSVWriter(dst, r.schema) as w:
        for b in r:
            w.write_batch(b)
"""


def measure(cmd: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds: user + system) of cmd in a fresh process.

    CPU seconds are the fairer comparison on a machine shared with other jobs, where the wall
    time also counts waiting for a core."""
    timer = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)
    if timer:
        start = time.perf_counter()
        out = subprocess.run(
            [timer, "-v", *cmd], capture_output=True, text=True, check=False, cwd=ROOT
        )
        wall = time.perf_counter() - start
        if out.returncode:
            raise SystemExit(f"failed: {' '.join(cmd)}\n{out.stderr[-2000:]}")
        field = {
            key.strip(): value.strip()
            for key, _, value in (line.partition(": ") for line in out.stderr.splitlines())
        }
        rss = int(field["Maximum resident set size (kbytes)"])
        cpu = float(field["User time (seconds)"]) + float(field["System time (seconds)"])
        return wall, rss / 1024, cpu
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, after.ru_maxrss / 1024, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=str(ROOT / "benchmarks" / "out" / "scale"))
    p.add_argument("--cells", default="parquet-2,csv-2,parquet-30,dask,evaluate,evaluate-diamonds")
    p.add_argument("--runs", type=int, default=3, help="runs of evaluate-diamonds")
    p.add_argument("--evaluate-flags", default="", help="more flags for evaluate-diamonds")
    p.add_argument("--rows", type=float, default=1e8, help="rows of the 2-column Parquet file")
    p.add_argument("--csv-rows", type=float, default=1e7)
    p.add_argument("--wide-rows", type=float, default=1e7)
    p.add_argument("--eval-rows", type=float, default=1e7)
    args = p.parse_args()
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    dpsynth = [py, "-m", "dpsynth_cli"]
    bounds2 = ["--bounds", "c0=0:100", "--bounds", "c1=0:100", "--eps", "1", "--quiet"]
    cells = args.cells.split(",")
    rows = {
        "parquet-2": (int(args.rows), 2, "parquet"),
        "csv-2": (int(args.csv_rows), 2, "csv"),
        "parquet-30": (int(args.wide_rows), 30, "parquet"),
        "evaluate": (int(args.eval_rows), 2, "parquet"),
    }
    print(
        "| cell | rows x cols | command | wall s | CPU s | peak RSS MiB | baseline wall s / CPU s "
        "(RSS MiB) | ratio wall / CPU | load average |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for cell in cells:
        if cell == "evaluate-diamonds":
            extra = args.evaluate_flags.split()
            scale_evaluate.run(out, args.runs, measure, BASELINE, extra)
            continue
        n, d, fmt = rows["parquet-2" if cell == "dask" else cell]
        src = out / f"scale_{n}x{d}.{fmt}"
        generate(src, n, d, fmt)
        dst = out / f"synth_{cell}.{fmt}"
        base, base_rss, base_cpu = measure(
            [py, "-c", BASELINE, str(src), str(out / f"copy.{fmt}"), fmt]
        )
        flags = bounds2 if d == 2 else ["--eps", "1", "--quiet", "--dim", "auto"]
        flags = flags + [f"--bounds=c{j}=0:100" for j in range(2, d)] * (d > 2)
        if d > 2:
            flags += ["--bounds=c0=0:100", "--bounds=c1=0:100"]
        engine = ["--engine", "dask"] if cell == "dask" else []
        synth = [*dpsynth, "synth", str(src), "-o", str(dst), *flags, *engine]
        if cell == "evaluate":
            subprocess.run(synth, check=True, cwd=ROOT, capture_output=True)
            evaluate = [*dpsynth, "evaluate", str(src), str(dst), *bounds2[:4], "-q"]
            wall, rss, cpu = measure(evaluate)
            what = "evaluate REAL SYNTH"
        else:
            wall, rss, cpu = measure(synth)
            what = f"synth {'--dim auto ' if d > 2 else ''}{' '.join(engine)}"
        load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"| {cell} | {n:,} x {d} | {what} | {wall:.1f} | {cpu:.1f} | {rss:.0f} | {base:.1f} / "
            f"{base_cpu:.1f} ({base_rss:.0f}) | {wall / base:.2f} / {cpu / base_cpu:.2f} | "
            f"{load} |",
            flush=True,
        )
        for f in (dst, Path(str(dst) + ".report.json"), out / f"copy.{fmt}"):
            if f.is_dir():  # --engine dask writes a directory of part files
                shutil.rmtree(f)
            elif f.exists():
                os.remove(f)


if __name__ == "__main__":
    main()
